//! The trace reader on small files of each format, and its handling of bad lines.

use crate::scratch;
use std::io::Write;
use std::path::{Path, PathBuf};

use bloomgate::trace::{
    Compression, ReadOptions, Request, TraceError, TraceFormat, TraceReader, TraceWriter,
    synthesized_size,
};

fn temp_dir(name: &str) -> PathBuf {
    let dir = scratch().join(format!("bloomgate-trace-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn read_all(path: &Path, options: ReadOptions) -> (Vec<Request>, TraceReader) {
    let mut reader = TraceReader::open(path, options).unwrap();
    let requests = reader.by_ref().collect::<Result<Vec<_>, _>>().unwrap();
    (requests, reader)
}

const CSV: &str = "time,key,size\n1,a,100\n2,b,200\n3,a,100\n";

fn request(time: f64, key: &str, size: u64) -> Request {
    Request {
        time,
        key: key.to_owned(),
        size,
        range: None,
    }
}

fn expected_csv() -> Vec<Request> {
    vec![
        request(1.0, "a", 100),
        request(2.0, "b", 200),
        request(3.0, "a", 100),
    ]
}

#[test]
fn plain_csv_is_read_in_order() {
    let dir = temp_dir("plain");
    let path = write_file(&dir, "t.csv", CSV.as_bytes());
    let (requests, reader) = read_all(&path, ReadOptions::default());
    assert_eq!(requests, expected_csv());
    assert_eq!(reader.info().compression, Compression::None);
    assert_eq!(reader.info().format, TraceFormat::Csv);
    assert!(!reader.sizes_synthesized());
}

#[test]
fn gzip_csv_is_detected_by_magic_bytes() {
    let dir = temp_dir("gzip");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(CSV.as_bytes()).unwrap();
    // A misleading extension: detection must not look at the name.
    let path = write_file(&dir, "t.csv", &encoder.finish().unwrap());
    let (requests, reader) = read_all(&path, ReadOptions::default());
    assert_eq!(requests, expected_csv());
    assert_eq!(reader.info().compression, Compression::Gzip);
}

#[test]
fn zstd_csv_is_detected_by_magic_bytes() {
    let dir = temp_dir("zstd");
    let bytes = zstd::encode_all(CSV.as_bytes(), 3).unwrap();
    let path = write_file(&dir, "t.gz", &bytes);
    let (requests, reader) = read_all(&path, ReadOptions::default());
    assert_eq!(requests, expected_csv());
    assert_eq!(reader.info().compression, Compression::Zstd);
}

#[test]
fn any_reader_is_read_like_a_file_and_named_in_errors() {
    let bytes = zstd::encode_all(CSV.as_bytes(), 3).unwrap();
    let mut reader = TraceReader::from_reader(
        std::io::Cursor::new(bytes),
        Path::new("upload.csv"),
        ReadOptions::default(),
    )
    .unwrap();
    let requests = reader.by_ref().collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(requests, expected_csv());
    assert_eq!(reader.info().compression, Compression::Zstd);

    let error = TraceReader::from_reader(
        &b"time,key,size\n1,a,big\n"[..],
        Path::new("upload.csv"),
        ReadOptions::default(),
    )
    .unwrap()
    .next()
    .unwrap()
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "upload.csv:2: size: invalid digit found in string"
    );
}

#[test]
fn libcachesim_header_with_extra_columns_is_read() {
    let dir = temp_dir("libcachesim");
    let text = "# time, object, size, next_access_vtime\n10, obj1, 4096, 3\n11, obj2, 512, -1\n";
    let path = write_file(&dir, "t.csv", text.as_bytes());
    let (requests, _) = read_all(&path, ReadOptions::default());
    assert_eq!(
        requests,
        vec![request(10.0, "obj1", 4096), request(11.0, "obj2", 512)]
    );
}

#[test]
fn missing_sizes_are_synthesized_from_the_key_and_reported() {
    let dir = temp_dir("nosize");
    let path = write_file(&dir, "t.csv", b"time,key,size\n1,a,\n2,b,7\n");
    let (requests, reader) = read_all(&path, ReadOptions::default());
    assert_eq!(requests[0].size, synthesized_size("a"));
    assert_eq!(requests[1].size, 7);
    assert!(reader.sizes_synthesized());

    let path = write_file(&dir, "keys.csv", b"key\nx\ny\n");
    let (requests, reader) = read_all(&path, ReadOptions::default());
    assert_eq!(requests[1], request(1.0, "y", synthesized_size("y")));
    assert!(reader.sizes_synthesized());
}

#[test]
fn nginx_combined_log_uses_uri_and_body_bytes() {
    let dir = temp_dir("nginx");
    let log = concat!(
        "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /img/a.png?x=1 HTTP/1.1\" 200 2326 ",
        "\"http://example.com/\" \"Mozilla/4.08\"\n",
        "10.0.0.2 - frank [10/Oct/2000:13:55:37 -0700] \"GET /b HTTP/2.0\" 304 0 \"-\" \"curl/8\"\n",
    );
    let path = write_file(&dir, "access.log", log.as_bytes());
    let (requests, reader) = read_all(&path, ReadOptions::default());
    assert_eq!(reader.info().format, TraceFormat::NginxCombined);
    assert_eq!(
        requests,
        vec![
            request(971_211_336.0, "/img/a.png?x=1", 2326),
            request(971_211_337.0, "/b", 0)
        ]
    );
}

#[test]
fn bad_line_is_an_error_naming_file_and_line() {
    let dir = temp_dir("bad");
    let path = write_file(
        &dir,
        "trace.csv",
        b"time,key,size\n1,a,10\n2,b,1x0\n3,c,5\n",
    );
    let mut reader = TraceReader::open(&path, ReadOptions::default()).unwrap();
    assert!(reader.next().unwrap().is_ok());
    let error = reader.next().unwrap().unwrap_err();
    assert!(matches!(
        error,
        TraceError::Field {
            line: 3,
            field: "size",
            ..
        }
    ));
    let message = error.to_string();
    assert!(
        message.ends_with("trace.csv:3: size: invalid digit found in string"),
        "{message}"
    );
}

#[test]
fn bad_lines_are_skipped_and_counted_when_asked() {
    let dir = temp_dir("skip");
    let text = "time,key,size\n1,a,10\nnot a time,b,1\n3,,5\n4,d,-1\n5,e,5\n";
    let path = write_file(&dir, "trace.csv", text.as_bytes());
    let (requests, reader) = read_all(
        &path,
        ReadOptions {
            skip_bad_lines: true,
        },
    );
    let keys: Vec<&str> = requests.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["a", "e"]);
    assert_eq!(reader.skipped_lines(), 3);
}

#[test]
fn invalid_utf8_is_a_bad_line_not_a_panic() {
    let dir = temp_dir("utf8");
    let path = write_file(&dir, "trace.csv", b"time,key,size\n1,\xff\xfe,10\n2,b,3\n");
    let mut reader = TraceReader::open(&path, ReadOptions::default()).unwrap();
    let error = reader.next().unwrap().unwrap_err();
    assert_eq!(error.line(), Some(2));
    let (requests, reader) = read_all(
        &path,
        ReadOptions {
            skip_bad_lines: true,
        },
    );
    assert_eq!(requests, vec![request(2.0, "b", 3)]);
    assert_eq!(reader.skipped_lines(), 1);
}

#[test]
fn unknown_format_and_missing_file_are_errors_naming_the_file() {
    let dir = temp_dir("unknown");
    let path = write_file(&dir, "what.txt", b"hello world\n");
    let error = TraceReader::open(&path, ReadOptions::default())
        .err()
        .unwrap();
    assert!(
        error
            .to_string()
            .contains("what.txt:1: unrecognized format"),
        "{error}"
    );
    let missing = dir.join("missing.csv");
    let error = TraceReader::open(&missing, ReadOptions::default())
        .err()
        .unwrap();
    assert!(error.to_string().contains("missing.csv"), "{error}");
}

#[test]
fn written_trace_reads_back_in_every_compression() {
    let dir = temp_dir("roundtrip");
    let requests = vec![request(0.5, "k1", 10), request(1.0, "u2", 20_000)];
    for (name, compression) in [
        ("t.csv", Compression::None),
        ("t.csv.gz", Compression::Gzip),
        ("t.csv.zst", Compression::Zstd),
    ] {
        let path = dir.join(name);
        let mut writer = TraceWriter::create(&path, compression).unwrap();
        for request in &requests {
            writer.write(request).unwrap();
        }
        writer.finish().unwrap();
        let (read, reader) = read_all(&path, ReadOptions::default());
        assert_eq!(read, requests, "{name}");
        assert_eq!(reader.info().compression, compression);
    }
}

/// The traces bundled in `load/traces/`, with the counts its README gives.
#[test]
fn bundled_traces_read_with_the_counts_their_readme_gives() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("load/traces");
    for (name, requests, distinct, once) in [
        ("web07.csv.gz", 76_118, 20_484, 11_066),
        ("web12.csv.gz", 95_607, 13_756, 6_207),
    ] {
        let (read, reader) = read_all(&dir.join(name), ReadOptions::default());
        let mut counts = std::collections::HashMap::<&str, u32>::new();
        for request in &read {
            *counts.entry(&request.key).or_default() += 1;
            assert_eq!(request.size, synthesized_size(&request.key), "{name}");
        }
        assert_eq!(read.len(), requests, "{name}: requests");
        assert_eq!(counts.len(), distinct, "{name}: distinct objects");
        let requested_once = counts.values().filter(|&&n| n == 1).count();
        assert_eq!(requested_once, once, "{name}: objects requested once");
        assert!(reader.info().sizes_synthesized, "{name} has no sizes");
        assert_eq!(reader.info().compression, Compression::Gzip);
    }
}

/// The traces that are not bundled (`load/traces/README.md` says where they come from), read from
/// `$BLOOMGATE_EXTRA_TRACES`, by default `../shared/traces` beside the repository; each one absent
/// is skipped with a note.
#[test]
fn extra_traces_read_without_errors() {
    let dir = match std::env::var_os("BLOOMGATE_EXTRA_TRACES") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces"),
    };
    for (name, requests) in [
        ("adaptsize.csv.gz", 66_987),
        ("tencent-photo-sample.csv.gz", 10_000),
    ] {
        let path = dir.join(name);
        if !path.exists() {
            eprintln!(
                "skipping {name}: {} not found (set BLOOMGATE_EXTRA_TRACES; load/traces/README.md says where it comes from)",
                path.display()
            );
            continue;
        }
        let (read, reader) = read_all(&path, ReadOptions::default());
        assert_eq!(read.len(), requests, "{name}");
        assert!(!reader.info().sizes_synthesized, "{name} records sizes");
        assert_eq!(reader.info().compression, Compression::Gzip);
    }
}
