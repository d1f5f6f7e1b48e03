//! The access log read back as a trace: a combined or JSON line as a request for a cached object.

use std::borrow::Cow;
use std::time::UNIX_EPOCH;

use crate::trace::error::LineError;
use crate::trace::range::RangeSpec;
use crate::trace::time_local::parse_nginx_time;

/// The fields of a JSON line that make a trace request.
#[derive(serde::Deserialize)]
struct JsonIn<'a> {
    #[serde(borrow)]
    time: Cow<'a, str>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    target: Cow<'a, str>,
    #[serde(borrow)]
    host: Option<Cow<'a, str>>,
    size: Option<u64>,
    #[serde(borrow, default)]
    range: Option<Cow<'a, str>>,
}

/// A logged request that is a request for a cached object: when, the object's size, and the
/// bytes of it asked for. Its key is left in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::trace) struct Logged {
    pub time: f64,
    pub size: u64,
    /// The one byte range its `Range` named; `None` for the whole object (no `Range`, or one a
    /// cache answers whole or as several parts: another unit, several ranges).
    pub range: Option<RangeSpec>,
}

/// Reads a JSON line; `Ok(None)` for a line that is not a request for a cached object.
pub(in crate::trace) fn read_json(
    line: &str,
    key: &mut String,
) -> Result<Option<Logged>, LineError> {
    let line: JsonIn<'_> = serde_json::from_str(line).map_err(|e| ("line", e.to_string()))?;
    let time = humantime::parse_rfc3339(&line.time)
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .ok_or_else(|| {
            (
                "time",
                format!("{:?} is not an RFC 3339 UTC time", line.time),
            )
        })?;
    if !answered_by_the_cache(&line.method) {
        return Ok(None);
    }
    let Some(size) = line.size else {
        return Ok(None);
    };
    object_key(key, line.host.as_deref(), &line.target);
    Ok(Some(Logged {
        time: time.as_secs_f64(),
        size,
        range: line
            .range
            .as_deref()
            .and_then(|range| one_range(range, size)),
    }))
}

/// Reads a combined line with bloomgate's fields; `Ok(None)` for a line that is not a request for
/// a cached object. A plain nginx line (no `host=` or `size=`) is an error.
pub(in crate::trace) fn read_combined(
    line: &str,
    key: &mut String,
) -> Result<Option<Logged>, LineError> {
    let mut rest = line;
    let open = rest
        .find(" [")
        .ok_or(("time_local", "missing '['".to_owned()))?;
    rest = &rest[open + 2..];
    let close = rest
        .find("] \"")
        .ok_or(("time_local", "missing ']'".to_owned()))?;
    let time = parse_nginx_time(&rest[..close]).ok_or_else(|| {
        (
            "time_local",
            format!("{:?} is not dd/Mon/yyyy:hh:mm:ss +zzzz", &rest[..close]),
        )
    })?;
    rest = &rest[close + 2..];
    let (request, after) = quoted(rest).ok_or(("request", "missing closing '\"'".to_owned()))?;
    let mut words = request.split(' ');
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return Err(("request", format!("{request:?} has no target")));
    };
    let (status, rest) = after
        .trim_start()
        .split_once(' ')
        .ok_or(("status", "missing".to_owned()))?;
    status
        .parse::<u16>()
        .map_err(|e| ("status", e.to_string()))?;
    let (_bytes_sent, rest) = rest
        .split_once(' ')
        .ok_or(("body_bytes_sent", "missing".to_owned()))?;
    let (_referer, rest) = quoted(rest).ok_or(("referer", "missing".to_owned()))?;
    let (_user_agent, rest) =
        quoted(rest.trim_start()).ok_or(("user_agent", "missing".to_owned()))?;
    let Fields { host, size, range } = bloomgate_fields(rest)?;
    let host = host.ok_or(("host", "missing".to_owned()))?;
    let size = match size.ok_or(("size", "missing".to_owned()))? {
        "-" => None,
        size => Some(size.parse::<u64>().map_err(|e| ("size", e.to_string()))?),
    };
    if !answered_by_the_cache(&unescape(method)) {
        return Ok(None);
    }
    let Some(size) = size else {
        return Ok(None);
    };
    let host = host.map(unescape);
    object_key(key, host.as_deref(), &unescape(target));
    let range = range.and_then(|range| one_range(&unescape(range), size));
    Ok(Some(Logged { time, size, range }))
}

/// bloomgate's `key=value` fields after the combined format's, as written (escaped).
struct Fields<'a> {
    /// `host`: `Some(None)` for a bare `-` (the request had none), `None` when missing.
    host: Option<Option<&'a str>>,
    size: Option<&'a str>,
    range: Option<&'a str>,
}

/// Reads the `key=value` fields of a combined line after its user agent; `host` is quoted when
/// the request had one, a bare `-` when not.
fn bloomgate_fields(mut rest: &str) -> Result<Fields<'_>, LineError> {
    let (mut host, mut size, mut range) = (None, None, None);
    loop {
        rest = rest.trim_start_matches(' ');
        if rest.is_empty() {
            break;
        }
        let (name, value) = rest
            .split_once('=')
            .ok_or(("fields", format!("{rest:?} is not key=value")))?;
        let (value, was_quoted, after) = match quoted(value) {
            Some((value, after)) => (value, true, after),
            None if value.starts_with('"') => {
                return Err(("fields", format!("{name}: missing closing '\"'")));
            }
            None => {
                let (value, after) = value.split_once(' ').unwrap_or((value, ""));
                (value, false, after)
            }
        };
        match name {
            "host" => host = Some(was_quoted.then_some(value)),
            "size" => size = Some(value),
            "range" if was_quoted => range = Some(value),
            _ => {}
        }
        rest = after;
    }
    Ok(Fields { host, size, range })
}

/// The one byte range a `Range` value names within an object of `size` bytes, if it names
/// exactly one (RFC 9110 section 14.2; the unit is case-insensitive). One that is not satisfiable
/// was answered whole or refused: the line asks for the whole object.
fn one_range(value: &str, size: u64) -> Option<RangeSpec> {
    let (unit, set) = value.trim().split_once('=')?;
    if !unit.eq_ignore_ascii_case("bytes") || set.contains(',') {
        return None;
    }
    RangeSpec::parse(set)
        .ok()
        .filter(|range| range.resolve(size).is_ok())
}

/// GET and HEAD: the methods the cache answers (and a HEAD stores what a GET would).
fn answered_by_the_cache(method: &str) -> bool {
    method == "GET" || method == "HEAD"
}

/// The object a request names: its host, lower-cased, then its origin-form target. An
/// absolute-form target names its own authority, as the proxy reads it.
fn object_key(key: &mut String, host: Option<&str>, target: &str) {
    key.clear();
    let (host, target) = match target.split_once("://") {
        Some((_, absolute)) if !target.starts_with('/') => {
            let path = absolute.find('/').unwrap_or(absolute.len());
            (Some(&absolute[..path]), &absolute[path..])
        }
        _ => (host, target),
    };
    if let Some(host) = host {
        key.extend(host.chars().map(|c| c.to_ascii_lowercase()));
    }
    key.push_str(target);
}

/// The text of a field starting with `"`, up to the next `"` (escaped quotes are `\x22`), and
/// what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let inner = text.strip_prefix('"')?;
    let end = inner.find('"')?;
    Some((&inner[..end], &inner[end + 1..]))
}

/// Undoes [`escape_into`](super::escape_into); a byte sequence that is not UTF-8 comes back
/// lossily.
fn unescape(text: &str) -> Cow<'_, str> {
    if !text.contains("\\x") {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x'))
            .then(|| bytes.get(i + 2..i + 4))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}
