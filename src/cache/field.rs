//! A header field that arrives on several lines is one field: its lines joined with commas, in
//! order (RFC 9110 section 5.3). Every rule that reads a request field for `Vary`, keying or
//! forwarding reads it through here, so no two readers can disagree about its value.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The combined value of `name`, or `None` when the field is absent.
pub fn combined<K>(headers: &HeaderMap, name: K) -> Option<HeaderValue>
where
    K: http::header::AsHeaderName,
{
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(first.clone());
    };
    let mut joined = Vec::with_capacity(first.len() + second.len() + 2);
    for (index, line) in [first, second].into_iter().chain(lines).enumerate() {
        // An empty line still counts: "" and "x" join as ", x", not "x".
        if index > 0 {
            joined.extend_from_slice(b", ");
        }
        joined.extend_from_slice(line.as_bytes());
    }
    // Joining valid field values with ", " gives a valid field value.
    HeaderValue::from_bytes(&joined).ok()
}

/// The combined values of several fields, in the order given: what `Vary` selects a variant by.
pub fn selection(headers: &HeaderMap, names: &[HeaderName]) -> Box<[Option<HeaderValue>]> {
    names.iter().map(|name| combined(headers, name)).collect()
}

/// `value` cut at each `delimiter` (an ASCII byte) that is not inside a quoted-string (RFC 9110
/// section 5.6.4; a backslash inside quotes escapes the next byte), pieces as they are, empty and
/// untrimmed ones included: lists (`,`) and parameters (`;`) read the same way.
pub fn split_outside_quotes(value: &str, delimiter: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(value);
    std::iter::from_fn(move || {
        let text = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (at, byte) in text.bytes().enumerate() {
            match byte {
                _ if escaped => escaped = false,
                b'\\' if quoted => escaped = true,
                b'"' => quoted = !quoted,
                _ if byte == delimiter && !quoted => {
                    // An ASCII delimiter is a character boundary.
                    rest = Some(&text[at + 1..]);
                    return Some(&text[..at]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

/// A header map of `pairs`, in order, each pair its own line: how unit tests write fields.
#[cfg(test)]
pub fn lines(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(*name, HeaderValue::from_static(value));
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting_skips_delimiters_in_quoted_strings() {
        let parts: Vec<&str> = split_outside_quotes(r#"a, "b, \"c, d", e"#, b',').collect();
        assert_eq!(parts, ["a", r#" "b, \"c, d""#, " e"]);
        let parts: Vec<&str> = split_outside_quotes(";x;", b';').collect();
        assert_eq!(parts, ["", "x", ""]);
    }

    #[test]
    fn lines_of_one_field_are_joined_in_order() {
        let mut headers = HeaderMap::new();
        headers.append("accept-encoding", HeaderValue::from_static("identity"));
        headers.append("accept-encoding", HeaderValue::from_static("gzip"));
        assert_eq!(
            combined(&headers, "accept-encoding")
                .as_ref()
                .map(HeaderValue::as_bytes),
            Some(&b"identity, gzip"[..])
        );
        assert_eq!(combined(&headers, "x-absent"), None);
    }

    #[test]
    fn an_empty_first_line_is_kept() {
        let mut headers = HeaderMap::new();
        headers.append("user-agent", HeaderValue::from_static(""));
        headers.append("user-agent", HeaderValue::from_static("victim/1.0"));
        assert_eq!(
            combined(&headers, "user-agent")
                .as_ref()
                .map(HeaderValue::as_bytes),
            Some(&b", victim/1.0"[..])
        );
    }

    #[test]
    fn one_line_and_two_lines_select_differently() {
        let names = [HeaderName::from_static("accept-encoding")];
        let mut one = HeaderMap::new();
        one.append("accept-encoding", HeaderValue::from_static("identity"));
        let mut two = one.clone();
        two.append("accept-encoding", HeaderValue::from_static("gzip"));
        assert_ne!(selection(&one, &names), selection(&two, &names));
    }
}
