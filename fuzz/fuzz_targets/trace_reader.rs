//! Fuzz target: the trace reader on arbitrary bytes (plain, gzip or zstd by their magic bytes).
//!
//! Never panics, and skipping bad lines changes nothing but the errors: both modes return the same
//! requests, and the skipping reader counts exactly the lines the strict one rejected.

#![no_main]

use std::io::Cursor;
use std::path::Path;

use bloomgate::trace::{ReadOptions, Request, TraceError, TraceReader};
use libfuzzer_sys::fuzz_target;

/// What one full pass over a trace returned.
struct Pass {
    requests: Vec<Request>,
    bad_lines: u64,
    skipped_lines: u64,
}

fn read(data: &[u8], skip_bad_lines: bool) -> Option<Pass> {
    let input = Cursor::new(data.to_vec());
    let options = ReadOptions { skip_bad_lines };
    let mut reader = TraceReader::from_reader(input, Path::new("fuzz.csv"), options).ok()?;
    let mut pass = Pass {
        requests: Vec::new(),
        bad_lines: 0,
        skipped_lines: 0,
    };
    while let Some(request) = reader.next_ref() {
        match request {
            Ok(request) => {
                assert!(!request.key.is_empty(), "an empty key was returned");
                pass.requests.push(request.to_request());
            }
            Err(TraceError::Field { .. }) => {
                assert!(!skip_bad_lines, "a bad line was returned while skipping");
                pass.bad_lines += 1;
            }
            // A decompression error ends the trace; the reader says so by returning None next.
            Err(_) => {}
        }
    }
    assert_eq!(reader.info().requests, pass.requests.len() as u64);
    pass.skipped_lines = reader.skipped_lines();
    Some(pass)
}

/// Requests compared with their times as bits, so that a `NaN` time equals itself.
fn comparable(requests: &[Request]) -> Vec<(u64, &str, u64)> {
    requests
        .iter()
        .map(|r| (r.time.to_bits(), r.key.as_str(), r.size))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let strict = read(data, false);
    let lenient = read(data, true);
    // The strict reader fails to open where the first line is not UTF-8; the lenient one reads on.
    if let (Some(strict), Some(lenient)) = (strict, lenient) {
        assert_eq!(comparable(&strict.requests), comparable(&lenient.requests));
        assert_eq!(strict.skipped_lines, 0);
        assert_eq!(strict.bad_lines, lenient.skipped_lines);
    }
});
