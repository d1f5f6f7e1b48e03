//! Reading traces: format and compression detection, line parsing, bad-line accounting.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::access_log::{self, Logged};
use super::error::LineError;
use super::time_local::parse_nginx_time;
use super::{Request, TraceError, synthesized_size};

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const BUFFER_BYTES: usize = 256 * 1024;

/// How to treat lines that cannot be parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip and count bad lines instead of returning an error for the first one. Default: `false`.
    pub skip_bad_lines: bool,
}

/// The compression a trace file was found to have, from its magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The line format a trace file was found to have, from its first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// CSV whose first line names its columns (`time,key,size` or `# time, object, size, ...`).
    Csv,
    /// nginx's `combined` access log: key = request URI, size = `$body_bytes_sent`.
    NginxCombined,
    /// bloomgate's own access log, combined format: key = host + target, size = the object's
    /// (GET and HEAD with a known size; other lines are ignored).
    BloomgateCombined,
    /// bloomgate's own access log, JSON lines, read as [`TraceFormat::BloomgateCombined`].
    BloomgateJson,
}

/// What a reader has found out about its trace so far.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceInfo {
    pub format: TraceFormat,
    pub compression: Compression,
    /// Requests returned so far.
    pub requests: u64,
    /// Bad lines skipped so far (only with [`ReadOptions::skip_bad_lines`]).
    pub skipped_lines: u64,
    /// Good lines that are no request for a cached object, passed over: in bloomgate's access
    /// logs, methods other than GET and HEAD, and objects of unknown size.
    pub ignored_lines: u64,
    /// Whether any request so far had no recorded size and got [`synthesized_size`] instead.
    pub sizes_synthesized: bool,
}

/// A request borrowed from the reader's line buffer: the allocation-free way to read a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRef<'a> {
    pub time: f64,
    pub key: &'a str,
    pub size: u64,
}

impl RequestRef<'_> {
    /// An owned copy.
    pub fn to_request(&self) -> Request {
        Request {
            time: self.time,
            key: self.key.to_owned(),
            size: self.size,
        }
    }
}

/// Where each field sits in a line of this trace.
#[derive(Debug, Clone)]
enum Layout {
    Csv {
        time: Option<usize>,
        key: usize,
        size: Option<usize>,
    },
    NginxCombined,
    BloomgateCombined,
    BloomgateJson,
}

/// One parsed line.
struct Parsed {
    time: Option<f64>,
    key: Key,
    size: Option<u64>,
}

/// Where a parsed line's key is.
enum Key {
    /// A range of the line buffer.
    InLine(Range<usize>),
    /// Built in the reader's key buffer (it joins fields, or undoes escapes).
    Built,
}

/// Reads a trace file as an iterator of requests.
///
/// # Examples
///
/// ```no_run
/// use bloomgate::trace::{ReadOptions, TraceReader};
/// let mut reader = TraceReader::open("trace.csv.zst".as_ref(), ReadOptions::default())?;
/// while let Some(request) = reader.next_ref() {
///     let request = request?;
///     println!("{} {}", request.key, request.size);
/// }
/// # Ok::<(), bloomgate::trace::TraceError>(())
/// ```
pub struct TraceReader {
    path: PathBuf,
    input: Lines,
    layout: Layout,
    options: ReadOptions,
    /// The current line: where it sits in the block reader's buffer, without its line ending.
    line: Range<usize>,
    /// The key of the last line, when it is not a slice of the line.
    key: String,
    line_number: u64,
    /// The first line was read to detect the format and is still to be returned (nginx logs).
    replay_line: bool,
    finished: bool,
    info: TraceInfo,
}

impl TraceReader {
    /// Opens `path`, detects its compression and format, and reads its header.
    pub fn open(path: &Path, options: ReadOptions) -> Result<TraceReader, TraceError> {
        let file = File::open(path).map_err(|source| TraceError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        TraceReader::from_reader(file, path, options)
    }

    /// Reads a trace from any byte source, as [`Self::open`] reads a file; `name` stands for the
    /// source in errors and in [`Self::path`].
    ///
    /// # Examples
    ///
    /// ```
    /// use bloomgate::trace::{ReadOptions, TraceReader};
    /// let csv = b"time,key,size\n1,/a.jpg,100\n".as_slice();
    /// let mut reader = TraceReader::from_reader(csv, "inline.csv".as_ref(), ReadOptions::default())?;
    /// let request = reader.next().transpose()?;
    /// assert_eq!(request.map(|r| r.key), Some("/a.jpg".to_owned()));
    /// # Ok::<(), bloomgate::trace::TraceError>(())
    /// ```
    pub fn from_reader<R: Read + Send + 'static>(
        input: R,
        name: &Path,
        options: ReadOptions,
    ) -> Result<TraceReader, TraceError> {
        let open_error = |source| TraceError::Open {
            path: name.to_path_buf(),
            source,
        };
        let mut file = BufReader::with_capacity(BUFFER_BYTES, input);
        let magic = file.fill_buf().map_err(open_error)?;
        let (compression, input): (Compression, Box<dyn Read + Send>) =
            if magic.starts_with(&ZSTD_MAGIC) {
                let decoder = zstd::stream::read::Decoder::with_buffer(file).map_err(open_error)?;
                (Compression::Zstd, Box::new(decoder))
            } else if magic.starts_with(&GZIP_MAGIC) {
                (
                    Compression::Gzip,
                    Box::new(flate2::read::MultiGzDecoder::new(file)),
                )
            } else {
                (Compression::None, Box::new(file))
            };
        let mut reader = TraceReader {
            path: name.to_path_buf(),
            input: Lines::new(input),
            layout: Layout::NginxCombined,
            options,
            line: 0..0,
            key: String::new(),
            line_number: 0,
            replay_line: false,
            finished: false,
            info: TraceInfo {
                format: TraceFormat::Csv,
                compression,
                requests: 0,
                skipped_lines: 0,
                ignored_lines: 0,
                sizes_synthesized: false,
            },
        };
        reader.detect_format()?;
        Ok(reader)
    }

    /// The file being read (or the name given to [`Self::from_reader`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Format, compression and counts so far.
    pub fn info(&self) -> &TraceInfo {
        &self.info
    }

    /// Bad lines skipped so far.
    pub fn skipped_lines(&self) -> u64 {
        self.info.skipped_lines
    }

    /// Whether any request so far got a [`synthesized_size`] because the trace had none for it.
    pub fn sizes_synthesized(&self) -> bool {
        self.info.sizes_synthesized
    }

    /// The next request, borrowed from the reader's buffer; `None` at the end of the trace.
    ///
    /// After an I/O or decompression error the reader returns `None`.
    pub fn next_ref(&mut self) -> Option<Result<RequestRef<'_>, TraceError>> {
        let parsed = loop {
            if self.finished {
                return None;
            }
            if self.replay_line {
                self.replay_line = false;
            } else {
                match self.read_line() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.finished = true;
                        return None;
                    }
                    Err(error) => return Some(Err(error)),
                }
            }
            // The line is parsed where the block reader holds it, never copied.
            let Ok(line) = std::str::from_utf8(&self.input.buffer[self.line.clone()]) else {
                if self.options.skip_bad_lines {
                    self.info.skipped_lines += 1;
                    continue;
                }
                return Some(Err(self.field_error("line", "not valid UTF-8".to_owned())));
            };
            if is_blank_or_comment(line) {
                continue;
            }
            match parse_line(&self.layout, line, &mut self.key) {
                Ok(Some(parsed)) => break parsed,
                Ok(None) => self.info.ignored_lines += 1,
                Err(_) if self.options.skip_bad_lines => self.info.skipped_lines += 1,
                Err((field, message)) => return Some(Err(self.field_error(field, message))),
            }
        };
        let key = match parsed.key {
            Key::InLine(range) => {
                let start = self.line.start;
                // A slice of the line checked above, on character boundaries: it is text.
                match std::str::from_utf8(
                    &self.input.buffer[start + range.start..start + range.end],
                ) {
                    Ok(key) => key,
                    Err(_) => return Some(Err(self.field_error("key", "not valid UTF-8".into()))),
                }
            }
            Key::Built => &self.key,
        };
        let size = match parsed.size {
            Some(size) => size,
            None => {
                self.info.sizes_synthesized = true;
                synthesized_size(key)
            }
        };
        let time = parsed.time.unwrap_or(self.info.requests as f64);
        self.info.requests += 1;
        Some(Ok(RequestRef { time, key, size }))
    }

    /// Makes the next line, without its line ending, the current one; `false` at the end of input.
    fn read_line(&mut self) -> Result<bool, TraceError> {
        match self.input.next_line() {
            Ok(Some(mut line)) => {
                self.line_number += 1;
                while line.end > line.start && self.input.buffer[line.end - 1] == b'\r' {
                    line.end -= 1;
                }
                self.line = line;
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(source) => {
                self.finished = true;
                Err(TraceError::Read {
                    path: self.path.clone(),
                    line: self.line_number + 1,
                    source,
                })
            }
        }
    }

    /// Reads the first meaningful line and decides between a CSV header, a bloomgate access log
    /// line (JSON or combined) and an nginx log line.
    fn detect_format(&mut self) -> Result<(), TraceError> {
        let line = loop {
            if !self.read_line()? {
                return Err(self.format_error("empty trace: no header line"));
            }
            match std::str::from_utf8(&self.input.buffer[self.line.clone()]) {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => break line.to_owned(),
                Err(_) if self.options.skip_bad_lines => self.info.skipped_lines += 1,
                Err(_) => return Err(self.field_error("line", "not valid UTF-8".to_owned())),
            }
        };
        let bloomgate = if line.starts_with('{') {
            access_log::read_json(&line, &mut self.key)
                .is_ok()
                .then_some((Layout::BloomgateJson, TraceFormat::BloomgateJson))
        } else if parse_nginx_combined(&line).is_ok() {
            Some(match access_log::read_combined(&line, &mut self.key) {
                Ok(_) => (Layout::BloomgateCombined, TraceFormat::BloomgateCombined),
                Err(_) => (Layout::NginxCombined, TraceFormat::NginxCombined),
            })
        } else {
            None
        };
        if let Some((layout, format)) = bloomgate {
            self.layout = layout;
            self.info.format = format;
            self.replay_line = true;
            return Ok(());
        }
        match csv_layout(&line) {
            Some(layout) => {
                self.layout = layout;
                self.info.format = TraceFormat::Csv;
                Ok(())
            }
            None => Err(self.format_error(
                "unrecognized format: expected a CSV header naming a key column \
                 (time,key,size or # time, object, size), an nginx combined log line \
                 or a bloomgate access log line",
            )),
        }
    }

    fn format_error(&self, message: &str) -> TraceError {
        TraceError::Format {
            path: self.path.clone(),
            line: self.line_number.max(1),
            message: message.to_owned(),
        }
    }

    fn field_error(&self, field: &'static str, message: String) -> TraceError {
        TraceError::Field {
            path: self.path.clone(),
            line: self.line_number,
            field,
            message,
        }
    }
}

impl Iterator for TraceReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref()
            .map(|request| request.map(|request| request.to_request()))
    }
}

/// Splits a byte stream into lines, reading it in large blocks: no allocation per line.
struct Lines {
    input: Box<dyn Read + Send>,
    buffer: Vec<u8>,
    /// Start of the bytes not yet returned.
    start: usize,
    /// End of the bytes read into `buffer`.
    end: usize,
    at_end: bool,
}

impl Lines {
    fn new(input: Box<dyn Read + Send>) -> Lines {
        Lines {
            input,
            buffer: vec![0; BUFFER_BYTES],
            start: 0,
            end: 0,
            at_end: false,
        }
    }

    /// Where the next line sits in `buffer` (until the next call), without its `\n`; `None` at
    /// the end of input. A last line without a `\n` is a line too.
    fn next_line(&mut self) -> std::io::Result<Option<Range<usize>>> {
        loop {
            let unread = &self.buffer[self.start..self.end];
            if let Some(length) = memchr::memchr(b'\n', unread) {
                let line = self.start..self.start + length;
                self.start += length + 1;
                return Ok(Some(line));
            }
            if self.at_end {
                if unread.is_empty() {
                    return Ok(None);
                }
                let line = self.start..self.end;
                self.start = self.end;
                return Ok(Some(line));
            }
            self.fill()?;
        }
    }

    /// Moves the unread bytes to the front (growing the buffer if a line fills it) and reads more.
    fn fill(&mut self) -> std::io::Result<()> {
        self.buffer.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        if self.end == self.buffer.len() {
            self.buffer.resize(self.buffer.len() * 2, 0);
        }
        loop {
            match self.input.read(&mut self.buffer[self.end..]) {
                Ok(0) => self.at_end = true,
                Ok(read) => self.end += read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
            return Ok(());
        }
    }
}

fn is_blank_or_comment(line: &str) -> bool {
    let line = trimmed(line);
    line.is_empty() || line.starts_with('#')
}

/// `text.trim()`, without looking further when both ends are visible ASCII (as trace fields are).
#[inline]
fn trimmed(text: &str) -> &str {
    let visible = |byte: Option<&u8>| byte.is_some_and(|&b| b > b' ' && b < 0x7f);
    let bytes = text.as_bytes();
    if visible(bytes.first()) && visible(bytes.last()) {
        text
    } else {
        text.trim()
    }
}

/// A CSV time field: seconds as `str::parse::<f64>` reads them, with a fast path for the plain
/// decimals traces hold (`12`, `0.001`).
#[inline]
fn parse_time(field: &str) -> Result<f64, std::num::ParseFloatError> {
    // Up to 15 digits make an integer below 2^53, and 10^15 is exact too: the quotient of two
    // exact doubles is correctly rounded, so it is the double nearest the decimal, as
    // `parse` finds it (Clinger's fast path).
    const MAX_DIGITS: usize = 15;
    let (whole, fraction) = match field.bytes().position(|b| b == b'.') {
        Some(dot) => (&field[..dot], &field[dot + 1..]),
        None => (field, ""),
    };
    let digits = whole.len() + fraction.len();
    let plain = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if digits == 0 || digits > MAX_DIGITS || !plain(whole) || !plain(fraction) {
        return field.parse();
    }
    let mantissa = whole
        .bytes()
        .chain(fraction.bytes())
        .fold(0u64, |n, digit| n * 10 + u64::from(digit - b'0'));
    Ok(mantissa as f64 / POWERS_OF_TEN[fraction.len()])
}

const POWERS_OF_TEN: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// The layout named by a CSV header line, or `None` if it names no key column.
fn csv_layout(header: &str) -> Option<Layout> {
    let header = header.trim_start().trim_start_matches('#');
    let mut time = None;
    let mut key = None;
    let mut size = None;
    for (index, name) in header.split(',').enumerate() {
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "time" | "timestamp" | "ts" | "clock_time" if time.is_none() => time = Some(index),
            "key" | "object" | "obj" | "obj_id" | "object_id" | "id" | "url" | "uri"
                if key.is_none() =>
            {
                key = Some(index)
            }
            "size" | "obj_size" | "object_size" | "bytes" if size.is_none() => size = Some(index),
            _ => {}
        }
    }
    Some(Layout::Csv {
        time,
        key: key?,
        size,
    })
}

/// One line's request; `None` for a line that is no request for a cached object.
fn parse_line(layout: &Layout, line: &str, key: &mut String) -> Result<Option<Parsed>, LineError> {
    let logged = |read: Option<Logged>| {
        read.map(|Logged { time, size }| Parsed {
            time: Some(time),
            key: Key::Built,
            size: Some(size),
        })
    };
    match layout {
        Layout::Csv { time, key, size } => parse_csv(line, *time, *key, *size).map(Some),
        Layout::NginxCombined => parse_nginx_combined(line).map(Some),
        Layout::BloomgateCombined => access_log::read_combined(line, key).map(logged),
        Layout::BloomgateJson => access_log::read_json(line, key).map(logged),
    }
}

fn parse_csv(
    line: &str,
    time_column: Option<usize>,
    key_column: usize,
    size_column: Option<usize>,
) -> Result<Parsed, LineError> {
    let mut parsed = Parsed {
        time: None,
        key: Key::InLine(0..0),
        size: None,
    };
    let mut key_found = false;
    // Columns after the last one read are never looked at.
    let last_column = key_column
        .max(time_column.unwrap_or(0))
        .max(size_column.unwrap_or(0));
    let bytes = line.as_bytes();
    let mut start = 0;
    for index in 0..=last_column {
        let end = bytes[start..]
            .iter()
            .position(|&byte| byte == b',')
            .map_or(line.len(), |length| start + length);
        let field = &line[start..end];
        if Some(index) == time_column {
            let field = trimmed(field);
            if !field.is_empty() {
                let time = parse_time(field).map_err(|e| ("time", e.to_string()))?;
                parsed.time = Some(time);
            }
        } else if index == key_column {
            let key = trimmed(field);
            let leading = key.as_ptr() as usize - field.as_ptr() as usize;
            if key.is_empty() {
                return Err(("key", "empty".to_owned()));
            }
            parsed.key = Key::InLine(start + leading..start + leading + key.len());
            key_found = true;
        } else if Some(index) == size_column {
            let field = trimmed(field);
            if !field.is_empty() {
                let size = field.parse::<u64>().map_err(|e| ("size", e.to_string()))?;
                parsed.size = Some(size);
            }
        }
        if end == line.len() {
            break;
        }
        start = end + 1;
    }
    if !key_found {
        return Err(("key", "missing column".to_owned()));
    }
    Ok(parsed)
}

/// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$referer" "$ua"`
fn parse_nginx_combined(line: &str) -> Result<Parsed, LineError> {
    let open = line
        .find(" [")
        .ok_or(("time_local", "missing '['".to_owned()))?;
    let close = line[open..]
        .find("] \"")
        .map(|i| open + i)
        .ok_or(("time_local", "missing ']'".to_owned()))?;
    let time = parse_nginx_time(&line[open + 2..close]).ok_or((
        "time_local",
        format!(
            "{:?} is not dd/Mon/yyyy:hh:mm:ss +zzzz",
            &line[open + 2..close]
        ),
    ))?;
    let request_start = close + 3;
    let request_len = line[request_start..]
        .find('"')
        .ok_or(("request", "missing closing '\"'".to_owned()))?;
    let request = &line[request_start..request_start + request_len];
    let mut words = request.split(' ');
    let uri = match (words.next(), words.next()) {
        (Some(_method), Some(uri)) if !uri.is_empty() => uri,
        _ => return Err(("request", format!("{request:?} has no URI"))),
    };
    let uri_start = uri.as_ptr() as usize - line.as_ptr() as usize;
    let mut after = line[request_start + request_len + 1..].split_ascii_whitespace();
    after
        .next()
        .filter(|status| status.parse::<u16>().is_ok())
        .ok_or(("status", "missing".to_owned()))?;
    let size = after
        .next()
        .ok_or(("body_bytes_sent", "missing".to_owned()))?
        .parse::<u64>()
        .map_err(|e| ("body_bytes_sent", e.to_string()))?;
    Ok(Parsed {
        time: Some(time),
        key: Key::InLine(uri_start..uri_start + uri.len()),
        size: Some(size),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_longer_than_the_buffer_and_a_last_line_without_newline_are_whole() {
        let long = "x".repeat(3 * BUFFER_BYTES);
        let text = format!("a\n{long}\n\nlast");
        let mut lines = Lines::new(Box::new(std::io::Cursor::new(text.into_bytes())));
        let mut seen = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            seen.push(String::from_utf8(lines.buffer[line].to_vec()).unwrap());
        }
        assert_eq!(seen, ["a", long.as_str(), "", "last"]);
    }

    #[test]
    fn a_plain_nginx_reader_reads_bloomgate_combined_lines_as_nginx_lines() {
        let logged = access_log::AccessLine {
            time: std::time::UNIX_EPOCH,
            target: "/a?b=\"c\"",
            bytes_sent: 512,
            user_agent: Some(b"agent \"quoted\""),
            ..access_log::tests::line()
        };
        let mut line = Vec::new();
        logged.write_combined(&mut line);
        let line = String::from_utf8(line).unwrap();
        let parsed = parse_nginx_combined(line.trim_end()).unwrap();
        let Key::InLine(key) = parsed.key else {
            panic!("an nginx key is a slice of its line");
        };
        assert_eq!(&line[key], "/a?b=\\x22c\\x22");
        assert_eq!((parsed.time, parsed.size), (Some(0.0), Some(512)));
    }

    #[test]
    fn fast_time_parsing_reads_what_parse_reads() {
        let fields = [
            "0",
            "12",
            "0.001",
            "1.5",
            "123456.789",
            "999999999999999",
            "0.000000000000001",
            "1234567890.12345",
            "007.50",
            "1.",
            ".5",
            ".",
            "",
            "1e3",
            "-2.5",
            "+1",
            "inf",
            "NaN",
            "1.2.3",
            "12345678901234567",
            "0.1234567890123456",
            "٣",
        ];
        for field in fields {
            let fast = parse_time(field).map_err(|e| e.to_string());
            let slow = field.parse::<f64>().map_err(|e| e.to_string());
            match (fast, slow) {
                (Ok(fast), Ok(slow)) => assert_eq!(fast.to_bits(), slow.to_bits(), "{field}"),
                (fast, slow) => assert_eq!(fast, slow, "{field}"),
            }
        }
        // Every millisecond of a day, as synthetic traces write them.
        for millis in 0..86_400_000u64 / 997 {
            let field = format!("{}.{:03}", millis * 997 / 1000, millis * 997 % 1000);
            assert_eq!(parse_time(&field), field.parse::<f64>(), "{field}");
        }
    }

    #[test]
    fn trimming_reads_what_trim_reads() {
        for field in [
            "a",
            " a",
            "a ",
            "\ta\u{a0}",
            "\u{2003}x",
            "",
            " ",
            "é",
            "/a b/",
        ] {
            assert_eq!(trimmed(field), field.trim(), "{field:?}");
        }
    }

    #[test]
    fn csv_header_names_columns_in_any_order() {
        let Some(Layout::Csv { time, key, size }) = csv_layout("# time, object, size, next_vtime")
        else {
            panic!("no layout");
        };
        assert_eq!((time, key, size), (Some(0), 1, Some(2)));
        assert!(csv_layout("a,b,c").is_none());
    }
}
