//! bloomgate's own access log: one request per line, written by the proxy in nginx's `combined`
//! format with bloomgate's fields after it, or as JSON, and read back here as a trace.
//!
//! Combined (nginx's `combined`, then `key=value` fields; times in UTC):
//!
//! ```text
//! 192.0.2.7 - - [10/Oct/2024:13:55:36 +0000] "GET /a.jpg?w=1 HTTP/1.1" 200 1024 "-" "curl/8.5" host="example.com" cache=miss fwd=miss detail=probation decision=probation origin_status=200 origin_ms=3.210 server=http://10.0.0.1:8080 duration_ms=3.512 size=1024 range=-
//! ```
//!
//! Every byte a client chose (method, target, referer, user agent, host) is written with `"`, `\`,
//! controls and non-ASCII bytes as `\xHH`, as nginx escapes them, so no client can end a field or
//! a line early: a forged field or line is impossible, and nginx-combined readers read the line.
//!
//! JSON: the same fields under the same names (`duration_ms`, `origin_ms` as numbers, `-` as
//! `null`), `time` in RFC 3339 with milliseconds, `client`, `method`, `target`, `protocol`,
//! `status`, `bytes_sent`, `user_agent`, `referer`.
//!
//! As a trace, a line is one request for the object `host` + `target` (the cache key under the
//! default `cache.key` rules) of `size` bytes, at `time`, for the bytes its `range` names (all of
//! them without one, or with one that is not a single byte range). Only GET and HEAD are requests the cache
//! answers: lines of other methods are skipped, as are lines whose object size the proxy did not
//! know (`size=-`: a 304 to a conditional request, a body cut short without a length).

use std::borrow::Cow;
use std::io::Write as _;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::time_local::civil_from_days;

#[cfg(feature = "tools")]
mod read;
#[cfg(feature = "tools")]
pub(super) use read::{Logged, read_combined, read_json};

/// One request as the access log records it.
#[derive(Debug, Clone)]
pub struct AccessLine<'a> {
    /// When the request arrived.
    pub time: SystemTime,
    pub client: IpAddr,
    pub method: &'a str,
    /// The request target as the client sent it (an HTTP/2 request's `:path`).
    pub target: &'a str,
    /// The authority the request named: an absolute-form target's or `:authority`, else `Host`.
    pub host: Option<&'a [u8]>,
    /// `HTTP/1.1`, `HTTP/2.0`, ...
    pub protocol: &'a str,
    pub status: u16,
    /// Body bytes handed to the client's connection.
    pub bytes_sent: u64,
    /// From the request's arrival to the end of its response body (sent, failed or dropped).
    pub duration: Duration,
    /// The `bloomgate_requests_total{cache_status}` outcome: `hit`, `miss`, `pass`, ...
    pub cache: &'a str,
    /// `Cache-Status`'s `fwd` and `detail`, when the response has them.
    pub fwd: Option<&'a str>,
    pub detail: Option<&'a str>,
    /// The admission decision, when one was made (a response from the origin for the cache).
    pub decision: Option<&'a str>,
    /// The origin's response head, when the origin was asked and answered: its status and how
    /// long it took to arrive.
    pub origin_status: Option<u16>,
    pub origin_time: Option<Duration>,
    /// The upstream server that sent that head (`http://10.0.0.1:8080`).
    pub server: Option<&'a str>,
    /// The whole object's length, when known: the response's `Content-Length` (a HEAD's too),
    /// else the body sent when it ended whole.
    pub size: Option<u64>,
    /// The request's `Range`, as sent: with `size`, the bytes of the object it asked for.
    pub range: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
}

impl AccessLine<'_> {
    /// Appends the line, with its `\n`, in the combined format.
    ///
    /// Written byte by byte rather than through `format!`: the request path pays for it.
    pub fn write_combined(&self, out: &mut Vec<u8>) {
        match self.client {
            IpAddr::V4(client) => {
                for (i, octet) in client.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push(b'.');
                    }
                    push_number(out, u64::from(octet));
                }
            }
            // Writing to a Vec cannot fail.
            IpAddr::V6(client) => drop(write!(out, "{client}")),
        }
        out.extend_from_slice(b" - - [");
        push_clf_time(out, self.time);
        out.extend_from_slice(b"] \"");
        escape_into(out, self.method.as_bytes());
        out.push(b' ');
        escape_into(out, self.target.as_bytes());
        out.push(b' ');
        escape_into(out, self.protocol.as_bytes());
        out.extend_from_slice(b"\" ");
        push_number(out, u64::from(self.status));
        out.push(b' ');
        push_number(out, self.bytes_sent);
        out.push(b' ');
        quoted_into(out, self.referer);
        out.push(b' ');
        quoted_into(out, self.user_agent);
        out.extend_from_slice(b" host=");
        match self.host {
            Some(host) => quoted_into(out, Some(host)),
            None => out.push(b'-'),
        }
        let words = [
            (&b" cache="[..], Some(self.cache)),
            (b" fwd=", self.fwd),
            (b" detail=", self.detail),
            (b" decision=", self.decision),
        ];
        for (key, value) in words {
            out.extend_from_slice(key);
            out.extend_from_slice(value.unwrap_or("-").as_bytes());
        }
        out.extend_from_slice(b" origin_status=");
        push_optional(out, self.origin_status.map(u64::from));
        out.extend_from_slice(b" origin_ms=");
        match self.origin_time {
            Some(time) => push_ms(out, time),
            None => out.push(b'-'),
        }
        // A URL from the configuration, checked when read: no space, quote or control byte.
        out.extend_from_slice(b" server=");
        out.extend_from_slice(self.server.unwrap_or("-").as_bytes());
        out.extend_from_slice(b" duration_ms=");
        push_ms(out, self.duration);
        out.extend_from_slice(b" size=");
        push_optional(out, self.size);
        out.extend_from_slice(b" range=");
        match self.range {
            Some(range) => quoted_into(out, Some(range)),
            None => out.push(b'-'),
        }
        out.push(b'\n');
    }

    /// Appends the line, with its `\n`, as one JSON object.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        fn text(bytes: Option<&[u8]>) -> Option<Cow<'_, str>> {
            bytes.map(String::from_utf8_lossy)
        }
        let ms = |time: Duration| time.as_micros() as f64 / 1000.0;
        let line = JsonOut {
            time: Rfc3339(self.time),
            client: self.client,
            method: self.method,
            target: self.target,
            host: text(self.host),
            protocol: self.protocol,
            status: self.status,
            bytes_sent: self.bytes_sent,
            duration_ms: ms(self.duration),
            cache: self.cache,
            fwd: self.fwd,
            detail: self.detail,
            decision: self.decision,
            origin_status: self.origin_status,
            origin_ms: self.origin_time.map(ms),
            server: self.server,
            size: self.size,
            range: text(self.range),
            user_agent: text(self.user_agent),
            referer: text(self.referer),
        };
        // Serialising strings, numbers and options into a Vec cannot fail.
        if serde_json::to_writer(&mut *out, &line).is_ok() {
            out.push(b'\n');
        }
    }
}

#[derive(serde::Serialize)]
struct JsonOut<'a> {
    time: Rfc3339,
    client: IpAddr,
    method: &'a str,
    target: &'a str,
    host: Option<Cow<'a, str>>,
    protocol: &'a str,
    status: u16,
    bytes_sent: u64,
    duration_ms: f64,
    cache: &'a str,
    fwd: Option<&'a str>,
    detail: Option<&'a str>,
    decision: Option<&'a str>,
    origin_status: Option<u16>,
    origin_ms: Option<f64>,
    server: Option<&'a str>,
    size: Option<u64>,
    range: Option<Cow<'a, str>>,
    user_agent: Option<Cow<'a, str>>,
    referer: Option<Cow<'a, str>>,
}

/// A time written as RFC 3339 in UTC with milliseconds.
struct Rfc3339(SystemTime);

impl serde::Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_rfc3339_millis(self.0))
    }
}

/// Writes a quoted, escaped field, or `"-"` when there is none.
fn quoted_into(out: &mut Vec<u8>, value: Option<&[u8]>) {
    out.push(b'"');
    match value {
        Some(value) => escape_into(out, value),
        None => out.push(b'-'),
    }
    out.push(b'"');
}

/// Writes bytes with `"`, `\`, controls and bytes outside printable ASCII as `\xHH` (nginx's
/// default `escape`), so a field can never hold its own end or a line break.
fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut rest = bytes;
    while let Some(at) = rest
        .iter()
        .position(|&byte| byte == b'"' || byte == b'\\' || !(0x20..0x7f).contains(&byte))
    {
        out.extend_from_slice(&rest[..at]);
        let byte = rest[at];
        out.extend_from_slice(&[
            b'\\',
            b'x',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]);
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
}

/// Appends a number in decimal.
fn push_number(out: &mut Vec<u8>, n: u64) {
    push_padded(out, n, 1);
}

/// Appends a number of at least `width` digits, zeros in front.
fn push_padded(out: &mut Vec<u8>, mut n: u64, width: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let length = digits.len() - at;
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(length)));
    out.extend_from_slice(&digits[at..]);
}

/// Appends a number, or `-` for none.
fn push_optional(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => push_number(out, n),
        None => out.push(b'-'),
    }
}

/// Milliseconds with microseconds: `3.210`.
fn push_ms(out: &mut Vec<u8>, time: Duration) {
    let micros = u64::try_from(time.as_micros()).unwrap_or(u64::MAX);
    push_number(out, micros / 1000);
    out.push(b'.');
    push_padded(out, micros % 1000, 3);
}

/// nginx's `$time_local` in UTC: `10/Oct/2024:13:55:36 +0000`.
fn push_clf_time(out: &mut Vec<u8>, time: SystemTime) {
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, of_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    push_padded(out, day as u64, 2);
    out.push(b'/');
    out.extend_from_slice(MONTHS[(month - 1) as usize]);
    out.push(b'/');
    push_padded(out, year as u64, 4);
    for part in [of_day / 3600, of_day / 60 % 60, of_day % 60] {
        out.push(b':');
        push_padded(out, part, 2);
    }
    out.extend_from_slice(b" +0000");
}

// The tests read lines back, which is the tools' part.
#[cfg(all(test, feature = "tools"))]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A miss stored in probation, the line the tests vary.
    pub(in crate::trace) fn line() -> AccessLine<'static> {
        AccessLine {
            time: UNIX_EPOCH + Duration::from_millis(1_728_568_536_789),
            client: "192.0.2.7".parse().unwrap(),
            method: "GET",
            target: "/a.jpg?w=1",
            host: Some(b"Example.com"),
            protocol: "HTTP/1.1",
            status: 200,
            bytes_sent: 1024,
            duration: Duration::from_micros(3512),
            cache: "miss",
            fwd: Some("miss"),
            detail: Some("probation"),
            decision: Some("probation"),
            origin_status: Some(200),
            origin_time: Some(Duration::from_micros(3210)),
            server: Some("http://10.0.0.1:8080"),
            size: Some(1024),
            range: None,
            user_agent: Some(b"curl/8.5"),
            referer: None,
        }
    }

    fn combined(line: &AccessLine<'_>) -> String {
        let mut out = Vec::new();
        line.write_combined(&mut out);
        String::from_utf8(out).unwrap()
    }

    fn json(line: &AccessLine<'_>) -> String {
        let mut out = Vec::new();
        line.write_json(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_combined_line_is_nginx_combined_followed_by_bloomgate_fields() {
        assert_eq!(
            combined(&line()),
            "192.0.2.7 - - [10/Oct/2024:13:55:36 +0000] \"GET /a.jpg?w=1 HTTP/1.1\" 200 1024 \
             \"-\" \"curl/8.5\" host=\"Example.com\" cache=miss fwd=miss detail=probation \
             decision=probation origin_status=200 origin_ms=3.210 server=http://10.0.0.1:8080 \
             duration_ms=3.512 size=1024 range=-\n"
        );
        let hit = AccessLine {
            cache: "hit",
            fwd: None,
            detail: None,
            decision: None,
            origin_status: None,
            origin_time: None,
            server: None,
            host: None,
            size: None,
            ..line()
        };
        assert!(
            combined(&hit).ends_with(
                "host=- cache=hit fwd=- detail=- decision=- origin_status=- origin_ms=- \
                 server=- duration_ms=3.512 size=- range=-\n"
            ),
            "{}",
            combined(&hit)
        );
    }

    #[test]
    fn a_json_line_names_every_field_and_writes_none_as_null() {
        let value: serde_json::Value = serde_json::from_str(&json(&line())).unwrap();
        assert_eq!(value["time"], "2024-10-10T13:55:36.789Z");
        assert_eq!(value["client"], "192.0.2.7");
        assert_eq!(value["host"], "Example.com");
        assert_eq!(value["protocol"], "HTTP/1.1");
        assert_eq!(value["status"], 200);
        assert_eq!(value["bytes_sent"], 1024);
        assert_eq!(value["duration_ms"], 3.512);
        assert_eq!(value["origin_ms"], 3.21);
        assert_eq!(value["decision"], "probation");
        assert_eq!(value["referer"], serde_json::Value::Null);
        assert_eq!(value["user_agent"], "curl/8.5");
    }

    #[test]
    fn a_forged_user_agent_cannot_end_the_line_or_a_field() {
        let forged = b"x\" cache=hit size=1\n127.0.0.1 - - [01/Jan/2000:00:00:00 +0000] \"GET /forged HTTP/1.1\" 200 1 \"-\" \"\\\xff";
        let attack = AccessLine {
            user_agent: Some(forged),
            referer: Some(b"\"\r\n"),
            host: Some(b"h\"ost"),
            ..line()
        };
        let text = combined(&attack);
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        assert!(
            text.contains("\"x\\x22 cache=hit size=1\\x0A127.0.0.1"),
            "{text}"
        );
        assert!(text.contains("\"\\x22\\x0D\\x0A\""), "{text}");
        assert!(text.contains("\\x5C\\xFF\""), "{text}");
        assert!(text.contains("host=\"h\\x22ost\" cache=miss"), "{text}");
        let mut key = String::new();
        let read = read_combined(text.trim_end(), &mut key).unwrap();
        assert_eq!(
            read.map(|r| r.size),
            Some(1024),
            "the real size, not the forged one"
        );
        assert_eq!(key, "h\"ost/a.jpg?w=1");
        let text = json(&attack);
        assert_eq!(text.matches('\n').count(), 1, "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            value["user_agent"]
                .as_str()
                .unwrap()
                .starts_with("x\" cache")
        );
    }

    #[test]
    fn a_combined_line_reads_back_as_the_request_for_its_object() {
        let mut key = String::new();
        let read = read_combined(combined(&line()).trim_end(), &mut key).unwrap();
        assert_eq!(
            read,
            Some(Logged {
                time: 1_728_568_536.0,
                size: 1024,
                range: None,
            })
        );
        assert_eq!(key, "example.com/a.jpg?w=1");
        let read = read_json(json(&line()).trim_end(), &mut key)
            .unwrap()
            .unwrap();
        assert!((read.time - 1_728_568_536.789).abs() < 1e-6, "{read:?}");
        assert_eq!(read.size, 1024);
        assert_eq!(key, "example.com/a.jpg?w=1");
    }

    #[test]
    fn other_methods_and_unknown_sizes_are_not_requests_for_an_object() {
        let mut key = String::new();
        let post = AccessLine {
            method: "POST",
            ..line()
        };
        let conditional = AccessLine {
            status: 304,
            size: None,
            ..line()
        };
        for skipped in [post, conditional] {
            assert_eq!(
                read_combined(combined(&skipped).trim_end(), &mut key),
                Ok(None)
            );
            assert_eq!(read_json(json(&skipped).trim_end(), &mut key), Ok(None));
        }
        let head = AccessLine {
            method: "HEAD",
            bytes_sent: 0,
            ..line()
        };
        let read = read_combined(combined(&head).trim_end(), &mut key).unwrap();
        assert_eq!(read.map(|r| r.size), Some(1024), "a HEAD names the object");
    }

    #[test]
    fn an_absolute_form_target_names_its_own_host() {
        let mut key = String::new();
        let absolute = AccessLine {
            target: "http://Other.example/p?q=1",
            ..line()
        };
        read_combined(combined(&absolute).trim_end(), &mut key).unwrap();
        assert_eq!(key, "other.example/p?q=1");
    }

    #[test]
    fn a_plain_nginx_line_is_not_a_bloomgate_line() {
        let nginx =
            "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a HTTP/1.1\" 200 5 \"-\" \"ua\"";
        assert!(read_combined(nginx, &mut String::new()).is_err());
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..40)
    }

    #[test]
    fn a_logged_range_reads_back_as_the_one_byte_range_it_names() {
        use crate::trace::range::RangeSpec;
        let cases: [(&[u8], Option<RangeSpec>); 8] = [
            (b"bytes=100-199", Some(RangeSpec::FromTo(100, 199))),
            (b"bytes=4096-", None),
            (b"bytes=1024-", Some(RangeSpec::From(1024))),
            (b"BYTES=-500", Some(RangeSpec::Suffix(500))),
            // Several parts, another unit, or no range at all: the whole object is asked for.
            (b"bytes=0-1,5-6", None),
            (b"items=1-2", None),
            (b"bytes=9-1", None),
            (b"bytes=\"x\" size=1", None),
        ];
        for (range, expected) in cases {
            let partial = AccessLine {
                status: 206,
                size: Some(4096),
                range: Some(range),
                ..line()
            };
            let mut key = String::new();
            for text in [combined(&partial), json(&partial)] {
                let read = match text.starts_with('{') {
                    true => read_json(text.trim_end(), &mut key),
                    false => read_combined(text.trim_end(), &mut key),
                };
                let read = read.unwrap().unwrap();
                assert_eq!((read.size, read.range), (4096, expected), "{text}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_client_bytes_stay_in_one_line_and_read_back(
            target in "/[!-~]{0,30}",
            host in bytes(),
            user_agent in bytes(),
            referer in bytes(),
            seconds in 0u64..253_402_300_799,
            size in any::<u64>(),
            range in bytes(),
        ) {
            let logged = AccessLine {
                time: UNIX_EPOCH + Duration::from_secs(seconds),
                target: &target,
                host: Some(&host),
                user_agent: Some(&user_agent),
                referer: Some(&referer),
                size: Some(size),
                range: Some(&range),
                ..line()
            };
            let text = combined(&logged);
            prop_assert_eq!(text.matches('\n').count(), 1);
            let mut key = String::new();
            let read = read_combined(text.trim_end(), &mut key).unwrap();
            let read = read.map(|Logged { time, size, .. }| (time, size));
            prop_assert_eq!(read, Some((seconds as f64, size)));
            let host = String::from_utf8_lossy(&host).to_ascii_lowercase();
            prop_assert_eq!(key, format!("{host}{target}"));
            let text = json(&logged);
            prop_assert_eq!(text.matches('\n').count(), 1);
            let read = read_json(text.trim_end(), &mut String::new()).unwrap();
            let read = read.map(|Logged { time, size, .. }| (time, size));
            prop_assert_eq!(read, Some((seconds as f64, size)));
        }

        #[test]
        fn any_line_is_read_or_refused_never_a_panic(line in "\\PC{0,200}", tail in "[ -~]{0,120}") {
            let mut key = String::new();
            let _ = read_combined(&line, &mut key);
            let _ = read_json(&line, &mut key);
            let near = format!("1.2.3.4 - - [01/Jan/2000:00:00:00 +0000] \"GET / HTTP/1.1\" 200 1 {tail}");
            let _ = read_combined(&near, &mut key);
        }
    }
}
