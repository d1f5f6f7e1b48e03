//! Strict HTTP/1.1 message parsing for checking what really crossed a socket: the requests an
//! origin received, byte for byte, and the responses a raw client got.
//!
//! Unlike the test origin's own lenient reader, these parsers accept only what RFC 9112 lets a
//! sender generate: CRLF line endings, no obs-fold, no whitespace before a colon, at most one
//! framing, and a body exactly as long as that framing says.

/// How a parsed message framed its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Neither Content-Length nor Transfer-Encoding.
    None,
    /// One Content-Length field with this value.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// One request as it was on the wire; header names lower-cased, values without surrounding OWS.
#[derive(Clone, Debug)]
pub struct WireRequest {
    pub method: String,
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
    /// The body, de-chunked when it was chunked.
    pub body: Vec<u8>,
}

impl WireRequest {
    /// Every value of `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Every line of `name` joined with ", " (RFC 9110 section 5.3).
    pub fn combined(&self, name: &str) -> Option<String> {
        let values = self.all(name);
        (!values.is_empty()).then(|| values.join(", "))
    }

    pub fn has(&self, name: &str) -> bool {
        self.headers.iter().any(|(n, _)| n == name)
    }
}

/// Parses a connection's bytes as a sequence of complete requests; an error describes the first
/// place where the bytes stop being well-framed HTTP/1.1 (including a body announced but not sent).
pub fn parse_requests(raw: &[u8]) -> Result<Vec<WireRequest>, String> {
    let mut requests = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let index = requests.len();
        let (request, used) = parse_request(rest).map_err(|e| {
            format!(
                "request {index} on the connection: {e}; the bytes from there on: {:?}",
                String::from_utf8_lossy(&rest[..rest.len().min(600)])
            )
        })?;
        requests.push(request);
        rest = &rest[used..];
    }
    Ok(requests)
}

/// Parses one request at the start of `raw`; returns it and the bytes it used.
fn parse_request(raw: &[u8]) -> Result<(WireRequest, usize), String> {
    let Head {
        start_line,
        fields,
        len: head_len,
    } = parse_head(raw)?;
    let mut parts = start_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!(
            "request line {start_line:?} is not `method SP target SP version`"
        ));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(format!("method {method:?} is not a token"));
    }
    if target.is_empty() || target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "target {target:?} is empty or has a space or control"
        ));
    }
    if version != "HTTP/1.1" {
        return Err(format!("version {version:?} is not HTTP/1.1"));
    }
    let framing = framing(&fields, true)?;
    let (body, body_len) = read_body(&raw[head_len..], framing)?;
    Ok((
        WireRequest {
            method: method.to_string(),
            target: target.to_string(),
            version: version.to_string(),
            headers: fields,
            framing,
            body,
        },
        head_len + body_len,
    ))
}

/// A parsed head: the start line, the fields (names lower-cased), and the bytes it took.
struct Head {
    start_line: String,
    fields: Vec<(String, String)>,
    len: usize,
}

/// The start line, the fields and the length of a head, strictly.
fn parse_head(raw: &[u8]) -> Result<Head, String> {
    let Some(end) = find(raw, b"\r\n\r\n") else {
        return Err(format!(
            "incomplete head ({} bytes without an empty line)",
            raw.len()
        ));
    };
    // Every line of the head, each with its CRLF.
    let head = &raw[..end + 2];
    let mut texts = Vec::new();
    for line in head[..head.len() - 1].split(|&b| b == b'\n') {
        let Some(line) = line.strip_suffix(b"\r") else {
            return Err("a line ends in a bare LF".to_string());
        };
        if line.contains(&b'\r') {
            return Err("a bare CR inside a line".to_string());
        }
        texts.push(line);
    }
    let start_line = String::from_utf8_lossy(texts[0]).into_owned();
    let mut fields = Vec::new();
    for line in &texts[1..] {
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err(format!(
                "obs-fold continuation line {:?}",
                String::from_utf8_lossy(line)
            ));
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(format!(
                "field line without a colon: {:?}",
                String::from_utf8_lossy(line)
            ));
        };
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(format!(
                "field name {:?} is not a token (whitespace before the colon?)",
                String::from_utf8_lossy(name)
            ));
        }
        let value = &line[colon + 1..];
        if value.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err(format!(
                "control character in the value of {:?}",
                String::from_utf8_lossy(name)
            ));
        }
        let value = String::from_utf8_lossy(value)
            .trim_matches(|c| c == ' ' || c == '\t')
            .to_string();
        fields.push((String::from_utf8_lossy(name).to_ascii_lowercase(), value));
    }
    Ok(Head {
        start_line,
        fields,
        len: end + 4,
    })
}

/// The framing the fields announce; an error for an ambiguous or invalid one (RFC 9112 6.1-6.3).
fn framing(fields: &[(String, String)], request: bool) -> Result<Framing, String> {
    let te: Vec<&str> = fields
        .iter()
        .filter(|(n, _)| n == "transfer-encoding")
        .map(|(_, v)| v.as_str())
        .collect();
    let cl: Vec<&str> = fields
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    if !te.is_empty() {
        // RFC 9112 section 6.1: a sender MUST NOT send Content-Length with Transfer-Encoding.
        if !cl.is_empty() {
            return Err("both Transfer-Encoding and Content-Length".to_string());
        }
        let codings = te.join(",");
        let last = codings.rsplit(',').next().unwrap_or_default().trim();
        if !last.eq_ignore_ascii_case("chunked") {
            if request {
                return Err(format!(
                    "Transfer-Encoding {codings:?} on a request does not end in chunked"
                ));
            }
            return Err(format!("Transfer-Encoding {codings:?} is not chunked"));
        }
        if codings.split(',').count() != 1 {
            return Err(format!("Transfer-Encoding {codings:?}: more than chunked"));
        }
        return Ok(Framing::Chunked);
    }
    match cl.as_slice() {
        [] => Ok(Framing::None),
        [one] if !one.is_empty() && one.bytes().all(|b| b.is_ascii_digit()) => one
            .parse()
            .map(Framing::Length)
            .map_err(|e| format!("Content-Length {one:?}: {e}")),
        [one] => Err(format!("Content-Length {one:?} is not a number")),
        many => Err(format!(
            "{} Content-Length fields {many:?} (RFC 9112 6.3: one, or reject)",
            many.len()
        )),
    }
}

/// Reads a body of the given framing at the start of `raw`; returns it and the bytes it used.
fn read_body(raw: &[u8], framing: Framing) -> Result<(Vec<u8>, usize), String> {
    match framing {
        Framing::None => Ok((Vec::new(), 0)),
        Framing::Length(length) => {
            if raw.len() < length {
                return Err(format!(
                    "Content-Length announces {length} bytes of body but only {} follow",
                    raw.len()
                ));
            }
            Ok((raw[..length].to_vec(), length))
        }
        Framing::Chunked => {
            let mut body = Vec::new();
            let mut at = 0;
            loop {
                let Some(line_end) = find(&raw[at..], b"\r\n") else {
                    return Err("chunked body cut short before a chunk size".to_string());
                };
                let line = String::from_utf8_lossy(&raw[at..at + line_end]).to_string();
                let size_text = line.split(';').next().unwrap_or_default();
                let size = usize::from_str_radix(size_text, 16)
                    .map_err(|_| format!("chunk size {line:?} is not hexadecimal"))?;
                at += line_end + 2;
                if size == 0 {
                    // Trailer section, then the empty line.
                    loop {
                        let Some(end) = find(&raw[at..], b"\r\n") else {
                            return Err("chunked body cut short in the trailers".to_string());
                        };
                        at += end + 2;
                        if end == 0 {
                            return Ok((body, at));
                        }
                    }
                }
                if raw.len() < at + size + 2 {
                    return Err(format!("chunk of {size} bytes cut short"));
                }
                body.extend_from_slice(&raw[at..at + size]);
                if &raw[at + size..at + size + 2] != b"\r\n" {
                    return Err("chunk data not followed by CRLF".to_string());
                }
                at += size + 2;
            }
        }
    }
}

/// One response as a raw client received it.
#[derive(Clone, Debug)]
pub struct WireResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl WireResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the responses in `raw` to one request (interim 1xx responses included), then any further
/// responses; `head_request` says whether the request was HEAD (no body in its responses). A
/// response without framing runs to the end of the bytes (the server closed to end it).
pub fn parse_responses(raw: &[u8], head_request: bool) -> Result<Vec<WireResponse>, String> {
    let mut responses = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let Head {
            start_line,
            fields,
            len: head_len,
        } = parse_head(rest).map_err(|e| format!("response {}: {e}", responses.len()))?;
        let status: u16 = start_line
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| start_line.strip_prefix("HTTP/1.0 "))
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("status line {start_line:?}"))?;
        let body_follows =
            !(head_request || (100..200).contains(&status) || status == 204 || status == 304);
        let (body, used) = if body_follows {
            match framing(&fields, false)? {
                Framing::None => (rest[head_len..].to_vec(), rest.len() - head_len),
                framing => read_body(&rest[head_len..], framing)?,
            }
        } else {
            (Vec::new(), 0)
        };
        responses.push(WireResponse {
            status,
            headers: fields,
            body,
        });
        rest = &rest[head_len + used..];
    }
    Ok(responses)
}

/// tchar of RFC 9110 section 5.6.2.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
