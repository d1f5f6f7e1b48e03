//! Writing traces as `time,key,size` CSV, plain or compressed.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{Compression, Request, TraceError};

const ZSTD_LEVEL: i32 = 3;

enum Sink {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

/// Writes requests as CSV with the header `time,key,size` (and `range` for a trace of ranges),
/// which [`super::TraceReader`] reads back.
pub struct TraceWriter {
    path: PathBuf,
    sink: Sink,
    ranges: bool,
}

impl TraceWriter {
    /// Creates (or truncates) `path` and writes the header `time,key,size`.
    pub fn create(path: &Path, compression: Compression) -> Result<TraceWriter, TraceError> {
        TraceWriter::open(path, compression, false)
    }

    /// Creates (or truncates) `path` and writes the header `time,key,size,range`: each line says
    /// the bytes its request asked for (`bytes=first-last`), or nothing for the whole object.
    pub fn create_with_ranges(
        path: &Path,
        compression: Compression,
    ) -> Result<TraceWriter, TraceError> {
        TraceWriter::open(path, compression, true)
    }

    fn open(
        path: &Path,
        compression: Compression,
        ranges: bool,
    ) -> Result<TraceWriter, TraceError> {
        let open_error = |source| TraceError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = BufWriter::with_capacity(256 * 1024, File::create(path).map_err(open_error)?);
        let sink = match compression {
            Compression::None => Sink::Plain(file),
            Compression::Gzip => Sink::Gzip(flate2::write::GzEncoder::new(
                file,
                flate2::Compression::default(),
            )),
            Compression::Zstd => {
                Sink::Zstd(zstd::stream::write::Encoder::new(file, ZSTD_LEVEL).map_err(open_error)?)
            }
        };
        let mut writer = TraceWriter {
            path: path.to_path_buf(),
            sink,
            ranges,
        };
        let header = if ranges {
            "time,key,size,range"
        } else {
            "time,key,size"
        };
        writer.write_line(format_args!("{header}\n"))?;
        Ok(writer)
    }

    /// Appends one request. Keys must not contain commas or line breaks. A writer made by
    /// [`Self::create`] leaves out the request's range.
    pub fn write(&mut self, request: &Request) -> Result<(), TraceError> {
        let (time, key, size) = (request.time, &request.key, request.size);
        match request.range.filter(|_| self.ranges) {
            Some(range) => self.write_line(format_args!(
                "{time},{key},{size},{}\n",
                range.header_value()
            )),
            None if self.ranges => self.write_line(format_args!("{time},{key},{size},\n")),
            None => self.write_line(format_args!("{time},{key},{size}\n")),
        }
    }

    /// Flushes and finishes the compressed stream; without it a compressed file is truncated.
    pub fn finish(self) -> Result<(), TraceError> {
        let path = self.path;
        let result = match self.sink {
            Sink::Plain(mut file) => file.flush(),
            Sink::Gzip(encoder) => encoder.finish().and_then(|mut file| file.flush()),
            Sink::Zstd(encoder) => encoder.finish().and_then(|mut file| file.flush()),
        };
        result.map_err(|source| TraceError::Write { path, source })
    }

    fn write_line(&mut self, line: std::fmt::Arguments<'_>) -> Result<(), TraceError> {
        let result = match &mut self.sink {
            Sink::Plain(file) => file.write_fmt(line),
            Sink::Gzip(encoder) => encoder.write_fmt(line),
            Sink::Zstd(encoder) => encoder.write_fmt(line),
        };
        result.map_err(|source| TraceError::Write {
            path: self.path.clone(),
            source,
        })
    }
}
