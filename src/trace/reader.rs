//! Reading traces: compression and format detection, lines read in large blocks, bad-line
//! accounting. What one line says is `line.rs`'s.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::line::{Key, Layout, Parsed, TraceFormat, is_blank_or_comment};
use super::{ByteRange, Request, TraceError, synthesized_size};

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
    /// The byte range asked for (a CSV trace's `range` column); `None` for the whole object.
    pub range: Option<ByteRange>,
}

impl RequestRef<'_> {
    /// An owned copy.
    pub fn to_request(&self) -> Request {
        Request {
            time: self.time,
            key: self.key.to_owned(),
            size: self.size,
            range: self.range,
        }
    }
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
        let (parsed, range) = loop {
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
            match self.layout.parse(line, &mut self.key) {
                Ok(Some(parsed)) => match self.range_of(&parsed) {
                    Ok(range) => break (parsed, range),
                    Err(_) if self.options.skip_bad_lines => self.info.skipped_lines += 1,
                    Err(message) => return Some(Err(self.field_error("range", message))),
                },
                Ok(None) => self.info.ignored_lines += 1,
                Err(_) if self.options.skip_bad_lines => self.info.skipped_lines += 1,
                Err((field, message)) => return Some(Err(self.field_error(field, message))),
            }
        };
        let key = match key_of(&self.input.buffer, self.line.start, &self.key, &parsed) {
            Ok(key) => key,
            Err(_) => return Some(Err(self.field_error("key", "not valid UTF-8".into()))),
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
        Some(Ok(RequestRef {
            time,
            key,
            size,
            range,
        }))
    }

    /// The bytes the current line asks for, read against its object's size; `None` for all.
    fn range_of(&self, parsed: &Parsed) -> Result<Option<ByteRange>, String> {
        let Some(spec) = parsed.range else {
            return Ok(None);
        };
        let size = match parsed.size {
            Some(size) => size,
            None => synthesized_size(
                key_of(&self.input.buffer, self.line.start, &self.key, parsed)
                    .map_err(|e| e.to_string())?,
            ),
        };
        spec.resolve(size).map(Some)
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
        match Layout::detect(&line, &mut self.key) {
            Some(layout) => {
                self.info.format = layout.format();
                self.replay_line = layout.first_line_is_a_request();
                self.layout = layout;
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

/// The key of the line that starts at `line_start` in `buffer`, as `parsed` found it (`built`
/// where the parser built it).
fn key_of<'a>(
    buffer: &'a [u8],
    line_start: usize,
    built: &'a str,
    parsed: &Parsed,
) -> Result<&'a str, std::str::Utf8Error> {
    match &parsed.key {
        // A slice of a line checked to be text, on character boundaries: it is text.
        Key::InLine(range) => {
            std::str::from_utf8(&buffer[line_start + range.start..line_start + range.end])
        }
        Key::Built => Ok(built),
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
}
