//! The authority a request names (`Host`, `:authority` or an absolute-form target), validated and
//! normalised, so that the cache key and the `Host` sent to the origin are built from one value.

use http::header;
use http::request::Parts;

/// Why a request's authority cannot be used: each is answered with 400 (RFC 9112 section 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    #[error("request has no host")]
    Missing,
    #[error("request has more than one Host field")]
    Repeated,
    #[error("request host is not a valid authority")]
    Invalid,
    #[error("request :authority and Host name different hosts")]
    Conflicting,
}

/// A valid authority: a host (reg-name, IPv4 or bracketed IP literal), lower-cased, and an
/// optional port. It never contains `/`, `?`, `#`, `@`, whitespace or control characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Authority(String);

impl Authority {
    /// The authority of a request.
    ///
    /// An absolute-form target or HTTP/2's `:authority` wins over `Host` (RFC 9112 section 3.2.2,
    /// RFC 9113 section 8.3.1), but a `Host` that is present must still be one valid field: a
    /// request with two `Host` lines or an invalid one is refused whatever else it carries
    /// (RFC 9112 section 3.2). Over HTTP/2 a `Host` naming another host than `:authority` is
    /// refused too, so the cache and the origin can never disagree about which host was meant.
    pub fn of_request(parts: &Parts) -> Result<Authority, AuthorityError> {
        let mut hosts = parts.headers.get_all(header::HOST).iter();
        let host_field = match (hosts.next(), hosts.next()) {
            (_, Some(_)) => return Err(AuthorityError::Repeated),
            (Some(value), None) => Some(Authority::parse(value.as_bytes())?),
            (None, None) => None,
        };
        let target = match parts.uri.authority() {
            Some(authority) => Some(Authority::parse(authority.as_str().as_bytes())?),
            None => None,
        };
        match (target, host_field) {
            (Some(target), Some(host))
                if parts.version == http::Version::HTTP_2 && target != host =>
            {
                Err(AuthorityError::Conflicting)
            }
            (Some(target), _) => Ok(target),
            (None, Some(host)) => Ok(host),
            (None, None) => Err(AuthorityError::Missing),
        }
    }

    /// Parses `host[:port]` (RFC 3986 section 3.2.2 and 3.2.3): a reg-name of unreserved,
    /// percent-encoded and sub-delimiter characters, or an IP literal in brackets.
    pub fn parse(bytes: &[u8]) -> Result<Authority, AuthorityError> {
        let (host, port) = match bytes.first() {
            None => return Err(AuthorityError::Missing),
            Some(b'[') => {
                let close = bytes
                    .iter()
                    .position(|&b| b == b']')
                    .ok_or(AuthorityError::Invalid)?;
                let literal = &bytes[1..close];
                let valid_literal = !literal.is_empty()
                    && literal
                        .iter()
                        .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'));
                if !valid_literal {
                    return Err(AuthorityError::Invalid);
                }
                (&bytes[..=close], &bytes[close + 1..])
            }
            Some(_) => match bytes.iter().rposition(|&b| b == b':') {
                Some(colon) => (&bytes[..colon], &bytes[colon..]),
                None => (bytes, &[][..]),
            },
        };
        let port_valid = match port {
            [] => true,
            [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
            _ => false,
        };
        let host_valid = host.first() == Some(&b'[')
            || (!host.is_empty() && host.iter().all(|&b| is_reg_name(b)));
        if !(port_valid && host_valid) {
            return Err(AuthorityError::Invalid);
        }
        // Every byte is ASCII by now, so the text is valid UTF-8.
        let text = String::from_utf8_lossy(bytes).to_ascii_lowercase();
        Ok(Authority(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A byte allowed in a reg-name (RFC 3986 section 3.2.2): unreserved, sub-delims and the `%` of
/// percent-encoding.
fn is_reg_name(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'%'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(target: &str, hosts: &[&str], version: http::Version) -> Result<String, AuthorityError> {
        let mut builder = http::Request::builder().uri(target).version(version);
        for host in hosts {
            builder = builder.header("host", *host);
        }
        let (parts, ()) = builder.body(()).expect("valid request").into_parts();
        Authority::of_request(&parts).map(|a| a.0)
    }

    #[test]
    fn valid_authorities_are_lower_cased() {
        for (host, expected) in [
            ("Example.COM:8080", "example.com:8080"),
            ("[::1]:80", "[::1]:80"),
            ("127.0.0.1", "127.0.0.1"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ] {
            assert_eq!(
                of("/", &[host], http::Version::HTTP_11).as_deref(),
                Ok(expected)
            );
        }
    }

    #[test]
    fn a_host_that_is_not_an_authority_is_refused() {
        for host in [
            "victim.example/some/prefix",
            "victim.example?x",
            "victim.example#x",
            "user@victim.example",
            "victim .example",
            "victim.example:80x",
            "victim.example:123456",
            ":80",
            "[::1",
            "[zz]",
            "a\tb",
        ] {
            assert_eq!(
                Authority::parse(host.as_bytes()),
                Err(AuthorityError::Invalid),
                "{host:?}"
            );
        }
        assert_eq!(Authority::parse(b"a\x01b"), Err(AuthorityError::Invalid));
        assert_eq!(Authority::parse(b""), Err(AuthorityError::Missing));
    }

    #[test]
    fn two_host_lines_are_refused() {
        assert_eq!(
            of("/", &["a.example", "a.example"], http::Version::HTTP_11),
            Err(AuthorityError::Repeated)
        );
    }

    #[test]
    fn absolute_form_wins_over_host_but_userinfo_is_refused() {
        assert_eq!(
            of(
                "http://other.test/a",
                &["example.com"],
                http::Version::HTTP_11
            )
            .as_deref(),
            Ok("other.test")
        );
        assert_eq!(
            of("http://user@victim.example/a", &[], http::Version::HTTP_11),
            Err(AuthorityError::Invalid)
        );
    }

    #[test]
    fn h2_authority_and_host_must_agree() {
        assert_eq!(
            of("http://a.example/", &["b.example"], http::Version::HTTP_2),
            Err(AuthorityError::Conflicting)
        );
        assert_eq!(
            of("http://a.example/", &["A.example"], http::Version::HTTP_2).as_deref(),
            Ok("a.example")
        );
    }
}
