//! One line of a trace, read as a request: the layouts a trace's first line reveals (a CSV header
//! naming its columns, nginx's `combined` log, bloomgate's own access log) and the parser of each.

use std::ops::Range;

use super::access_log::{self, Logged};
use super::error::LineError;
use super::range::RangeSpec;
use super::time_local::parse_nginx_time;

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

/// Where each field sits in a line of this trace.
#[derive(Debug, Clone)]
pub(super) enum Layout {
    Csv {
        time: Option<usize>,
        key: usize,
        size: Option<usize>,
        /// A `range` column: the byte range the request asked for, empty for the whole object.
        range: Option<usize>,
    },
    NginxCombined,
    BloomgateCombined,
    BloomgateJson,
}

/// One parsed line.
pub(super) struct Parsed {
    pub time: Option<f64>,
    pub key: Key,
    pub size: Option<u64>,
    /// The byte range asked for; `None` for the whole object.
    pub range: Option<RangeSpec>,
}

/// Where a parsed line's key is.
pub(super) enum Key {
    /// A range of the line buffer.
    InLine(Range<usize>),
    /// Built in the reader's key buffer (it joins fields, or undoes escapes).
    Built,
}

impl Layout {
    /// The layout a trace's first meaningful line reveals: bloomgate's access log (JSON or
    /// combined), nginx's `combined` log, or a CSV header naming a key column; `None` for none of
    /// them.
    pub(super) fn detect(line: &str, key: &mut String) -> Option<Layout> {
        let log = if line.starts_with('{') {
            access_log::read_json(line, key)
                .is_ok()
                .then_some(Layout::BloomgateJson)
        } else if parse_nginx_combined(line).is_ok() {
            Some(match access_log::read_combined(line, key) {
                Ok(_) => Layout::BloomgateCombined,
                Err(_) => Layout::NginxCombined,
            })
        } else {
            None
        };
        log.or_else(|| csv_layout(line))
    }

    pub(super) fn format(&self) -> TraceFormat {
        match self {
            Layout::Csv { .. } => TraceFormat::Csv,
            Layout::NginxCombined => TraceFormat::NginxCombined,
            Layout::BloomgateCombined => TraceFormat::BloomgateCombined,
            Layout::BloomgateJson => TraceFormat::BloomgateJson,
        }
    }

    /// Whether the line the layout was detected from is a request (a log line), not a header.
    pub(super) fn first_line_is_a_request(&self) -> bool {
        !matches!(self, Layout::Csv { .. })
    }

    /// One line's request; `None` for a line that is no request for a cached object.
    pub(super) fn parse(&self, line: &str, key: &mut String) -> Result<Option<Parsed>, LineError> {
        let logged = |read: Option<Logged>| {
            read.map(|Logged { time, size, range }| Parsed {
                time: Some(time),
                key: Key::Built,
                size: Some(size),
                range,
            })
        };
        match self {
            Layout::Csv {
                time,
                key,
                size,
                range,
            } => parse_csv(line, *time, *key, *size, *range).map(Some),
            Layout::NginxCombined => parse_nginx_combined(line).map(Some),
            Layout::BloomgateCombined => access_log::read_combined(line, key).map(logged),
            Layout::BloomgateJson => access_log::read_json(line, key).map(logged),
        }
    }
}

pub(super) fn is_blank_or_comment(line: &str) -> bool {
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
    let mut range = None;
    for (index, name) in header.split(',').enumerate() {
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "time" | "timestamp" | "ts" | "clock_time" if time.is_none() => time = Some(index),
            // Block-I/O traces (libCacheSim's cloudPhysicsIO.csv: `version,time,op,size,lbn`) name
            // the block, which is the object a cache keeps.
            "key" | "object" | "obj" | "obj_id" | "object_id" | "id" | "url" | "uri" | "lbn"
            | "lba" | "block"
                if key.is_none() =>
            {
                key = Some(index)
            }
            "size" | "obj_size" | "object_size" | "bytes" if size.is_none() => size = Some(index),
            "range" if range.is_none() => range = Some(index),
            _ => {}
        }
    }
    Some(Layout::Csv {
        time,
        key: key?,
        size,
        range,
    })
}

fn parse_csv(
    line: &str,
    time_column: Option<usize>,
    key_column: usize,
    size_column: Option<usize>,
    range_column: Option<usize>,
) -> Result<Parsed, LineError> {
    let mut parsed = Parsed {
        time: None,
        key: Key::InLine(0..0),
        size: None,
        range: None,
    };
    let mut key_found = false;
    // Columns after the last one read are never looked at.
    let last_column = key_column
        .max(time_column.unwrap_or(0))
        .max(size_column.unwrap_or(0))
        .max(range_column.unwrap_or(0));
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
        } else if Some(index) == range_column {
            let field = trimmed(field);
            if !field.is_empty() {
                parsed.range = Some(RangeSpec::parse(field).map_err(|e| ("range", e))?);
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
        range: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let Some(Layout::Csv {
            time,
            key,
            size,
            range,
        }) = csv_layout("# time, object, size, next_vtime")
        else {
            panic!("no layout");
        };
        assert_eq!((time, key, size, range), (Some(0), 1, Some(2), None));
        let Some(Layout::Csv { range, .. }) = csv_layout("range,time,key") else {
            panic!("no layout");
        };
        assert_eq!(range, Some(0));
        assert!(csv_layout("a,b,c").is_none());
        let Some(Layout::Csv {
            time, key, size, ..
        }) = csv_layout("version,time,op,size,lbn")
        else {
            panic!("a block trace's header names its block");
        };
        assert_eq!((time, key, size), (Some(1), 4, Some(3)));
    }
}
