//! The path a route is chosen by: a request's path as an origin reads it, so that another
//! spelling of a route's path takes that route (and its cache rules) too.

use std::borrow::Cow;

/// `path` normalised for matching a route's prefix: unreserved characters decoded and dot
/// segments removed (RFC 3986 sections 6.2.2.2 and 5.2.4), empty segments merged as nginx and
/// most origins merge them. Without any of them, `path` itself.
///
/// Only the choice of route reads it: the key and the origin keep the client's target, so one
/// stored object still answers one target.
pub(super) fn route_path(path: &str) -> Cow<'_, str> {
    if !path.contains('%') && !path.contains("/.") && !path.contains("//") {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let mut segments: Vec<&str> = Vec::new();
    let mut ends_in_directory = false;
    for segment in decoded.split('/') {
        ends_in_directory = matches!(segment, "" | "." | "..");
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    let mut normal = String::with_capacity(decoded.len());
    for segment in &segments {
        normal.push('/');
        normal.push_str(segment);
    }
    if ends_in_directory || segments.is_empty() {
        normal.push('/');
    }
    Cow::Owned(normal)
}

/// `path` with each `%XX` that encodes an unreserved character (RFC 3986 section 2.3) decoded;
/// every other escape stays as sent, as decoding it would change what the path means.
fn decode_unreserved(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut at = 0;
    while at < bytes.len() {
        let decoded = (bytes[at] == b'%')
            .then(|| path.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|byte| byte.is_ascii_alphanumeric() || b"-._~".contains(byte));
        match decoded {
            Some(byte) => {
                out.push(char::from(byte));
                at += 3;
            }
            None => {
                // Bytes of a `&str` split only at char boundaries here: `%` and hex are ASCII.
                let next = path[at..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&path[at..at + next]);
                at += next;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_path_is_matched_as_sent() {
        assert!(matches!(
            route_path("/account/me"),
            Cow::Borrowed("/account/me")
        ));
    }

    #[test]
    fn other_spellings_of_a_path_are_matched_as_it() {
        for spelling in [
            "/%61ccount/me",
            "/%61%63count/me",
            "/static/../account/me",
            "/./account/me",
            "/static/%2e%2E/account/me",
            "//account//me",
            "/../../account/me",
        ] {
            assert_eq!(route_path(spelling), "/account/me", "{spelling}");
        }
        assert_eq!(route_path("/account/x/.."), "/account/");
        assert_eq!(route_path("/.."), "/");
    }

    #[test]
    fn reserved_and_non_ascii_escapes_stay_encoded() {
        assert_eq!(route_path("/a%2Fb/%c3%a9//"), "/a%2Fb/%c3%a9/");
        assert_eq!(route_path("/é/%"), "/é/%");
    }
}
