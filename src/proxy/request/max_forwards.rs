//! `Max-Forwards` (RFC 9110 section 7.6.2): an `OPTIONS` or `TRACE` whose count reaches this proxy
//! at zero is answered here, as its final recipient; with a count above zero it goes on with the
//! count one lower. Other methods, and a value that is not a count, pass as they came.

use bytes::{BufMut, Bytes, BytesMut};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Method, Response, StatusCode, header};

use crate::proxy::outcome::served::Served;
use crate::proxy::response::respond::{self, Answer};

/// What the proxy answers an `OPTIONS` for itself: the methods it takes (`CONNECT` is refused).
const ALLOW: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE";

/// Fields a `TRACE` reflection leaves out: credentials the client should not have sent (RFC 9110
/// section 9.3.8 asks the final recipient to exclude fields likely to hold sensitive data).
const NOT_REFLECTED: [HeaderName; 3] = [
    header::AUTHORIZATION,
    header::PROXY_AUTHORIZATION,
    header::COOKIE,
];

/// The proxy's own answer when `parts` is an `OPTIONS` or `TRACE` that arrives with
/// `Max-Forwards: 0`; otherwise `None`, with the count lowered by one for the origin.
pub(super) fn answer_here(parts: &mut Parts) -> Option<Answer> {
    if parts.method != Method::OPTIONS && parts.method != Method::TRACE {
        return None;
    }
    let remaining = count(parts.headers.get(header::MAX_FORWARDS)?)?;
    if let Some(lower) = remaining.checked_sub(1) {
        parts
            .headers
            .insert(header::MAX_FORWARDS, HeaderValue::from(lower));
        return None;
    }
    let mut response = if parts.method == Method::TRACE {
        let mut response = Response::new(respond::full(reflection(parts)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("message/http"),
        );
        response
    } else {
        let mut response = Response::new(respond::empty());
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
        response
    };
    *response.status_mut() = StatusCode::OK;
    Some(Answer::new(response, Served::Refused))
}

/// `Max-Forwards = 1*DIGIT`; a value too large for a u64 is as good as unlimited.
fn count(value: &HeaderValue) -> Option<u64> {
    let text = value.to_str().ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits only: a parse error can only be overflow (as `cache::control::delta_seconds` reads).
    Some(text.parse().unwrap_or(u64::MAX))
}

/// The request as received, for a `TRACE`'s body: its request line and fields, credentials left out.
fn reflection(parts: &Parts) -> Bytes {
    let mut out = BytesMut::new();
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |target| target.as_str());
    out.put_slice(format!("TRACE {target} {:?}\r\n", parts.version).as_bytes());
    for (name, value) in &parts.headers {
        if NOT_REFLECTED.contains(name) {
            continue;
        }
        out.put_slice(name.as_str().as_bytes());
        out.put_slice(b": ");
        out.put_slice(value.as_bytes());
        out.put_slice(b"\r\n");
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(method: Method, max_forwards: Option<&str>) -> Parts {
        let mut request = Request::builder()
            .method(method)
            .uri("http://example.test/a?b")
            .header(header::HOST, "example.test")
            .header(header::COOKIE, "session=secret");
        if let Some(value) = max_forwards {
            request = request.header(header::MAX_FORWARDS, value);
        }
        request.body(()).expect("request").into_parts().0
    }

    #[test]
    fn a_count_above_zero_goes_on_one_lower() {
        let mut options = parts(Method::OPTIONS, Some("3"));
        assert!(answer_here(&mut options).is_none());
        assert_eq!(options.headers[header::MAX_FORWARDS], "2");
        let mut huge = parts(Method::TRACE, Some("99999999999999999999999"));
        assert!(answer_here(&mut huge).is_none());
        assert_eq!(
            huge.headers[header::MAX_FORWARDS],
            (u64::MAX - 1).to_string()
        );
    }

    #[test]
    fn other_methods_and_values_that_are_not_counts_pass_as_they_came() {
        for (method, value) in [
            (Method::GET, "0"),
            (Method::OPTIONS, "-1"),
            (Method::OPTIONS, "1.0"),
            (Method::OPTIONS, ""),
        ] {
            let mut request = parts(method, Some(value));
            assert!(answer_here(&mut request).is_none(), "{value:?}");
            assert_eq!(request.headers[header::MAX_FORWARDS], value);
        }
        assert!(answer_here(&mut parts(Method::OPTIONS, None)).is_none());
    }

    #[test]
    fn a_trace_at_zero_reflects_the_request_without_its_credentials() {
        let mut trace = parts(Method::TRACE, Some("0"));
        let answer = answer_here(&mut trace).expect("answered here");
        assert_eq!(answer.response.status(), StatusCode::OK);
        assert_eq!(
            answer.response.headers()[header::CONTENT_TYPE],
            "message/http"
        );
        let body = reflection(&trace);
        let text = std::str::from_utf8(&body).expect("text");
        assert!(text.starts_with("TRACE /a?b HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("host: example.test\r\n"), "{text}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn an_options_at_zero_says_what_the_proxy_allows() {
        let answer = answer_here(&mut parts(Method::OPTIONS, Some("0"))).expect("answered here");
        assert_eq!(answer.response.status(), StatusCode::OK);
        assert_eq!(answer.response.headers()[header::ALLOW], ALLOW);
    }
}
