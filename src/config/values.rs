//! Config values: sizes, durations, addresses, networks and the origin URL, read from TOML values.
//!
//! Each reader returns the problem as text without the key; the caller prefixes the dotted key.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use http::Uri;
use ipnet::IpNet;
use toml::Value;

use super::size::parse_size;

// The readers the `[admission]` table's keys are read with live in the doorkeeper crate, which the
// Pingora plugin reads that table with; every other key is read with the same ones, so that all
// messages read alike.
pub use bloomgate_admission::table::{count, duration, number, one_of, shown, string};

/// Reads a byte size: an integer (bytes) or a string that [`parse_size`] reads, such as `"512MiB"`.
pub fn size(value: &Value) -> Result<u64, String> {
    let expected = || format!("expected a size like \"512MiB\", got {}", shown(value));
    match value {
        Value::Integer(bytes) => u64::try_from(*bytes).map_err(|_| expected()),
        Value::String(text) => parse_size(text).map_err(|_| expected()),
        _ => Err(expected()),
    }
}

/// Reads a slice size: a power of two from 64KiB to 64MiB, so slices align with the block sizes
/// clients and disks use (ATS's slice plugin and nginx's `slice` take the same range).
pub fn slice_size(value: &Value) -> Result<u64, String> {
    let bytes = size(value)?;
    if !bytes.is_power_of_two() || !(64 << 10..=64 << 20).contains(&bytes) {
        return Err(format!(
            "must be a power of two from 64KiB to 64MiB, got {}",
            shown(value)
        ));
    }
    Ok(bytes)
}

/// Reads a duration that must be longer than zero (timeouts, ages).
pub fn positive_duration(value: &Value) -> Result<Duration, String> {
    let duration = duration(value)?;
    if duration.is_zero() {
        return Err(format!("must be greater than 0, got {}", shown(value)));
    }
    Ok(duration)
}

/// Reads a socket address such as `"127.0.0.1:8080"` or `"[::1]:8080"`.
pub fn socket_addr(value: &Value) -> Result<SocketAddr, String> {
    let expected = || {
        format!(
            "expected a socket address like \"127.0.0.1:8080\" or \"[::1]:8080\", got {}",
            shown(value)
        )
    };
    let text = value.as_str().ok_or_else(expected)?;
    text.trim().parse().map_err(|_| expected())
}

/// Reads a list of networks in CIDR notation (`"127.0.0.0/8"`, `"::1/128"`); a bare address is one host.
pub fn networks(value: &Value) -> Result<Vec<IpNet>, String> {
    list(
        value,
        "networks like [\"127.0.0.0/8\", \"::1/128\"]",
        |item| {
            let text = item.as_str()?.trim();
            text.parse::<IpNet>()
                .ok()
                .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
        },
    )
}

/// Reads a list of non-empty strings.
pub fn names(value: &Value) -> Result<Vec<String>, String> {
    list(value, "a list of names like [\"utm_source\"]", |item| {
        item.as_str()
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
    })
}

/// Reads a list of `Link` field values (RFC 8288: `<uri-reference>` and its parameters), each
/// one a valid field value: what a route's `early_hints` sends in a `103 Early Hints`.
pub fn links(value: &Value) -> Result<Vec<http::HeaderValue>, String> {
    let texts = names(value).map_err(|_| {
        "expected a list of Link values like [\"</app.css>; rel=preload; as=style\"]".to_owned()
    })?;
    texts
        .into_iter()
        .map(|text| {
            let linked = text.starts_with('<') && text[1..].contains('>');
            match (linked, http::HeaderValue::from_str(&text)) {
                (true, Ok(value)) => Ok(value),
                _ => Err(format!(
                    "{text:?} is not a Link value: expected <uri-reference> and parameters, \
                     like \"</app.css>; rel=preload; as=style\", on one line"
                )),
            }
        })
        .collect()
}

/// Reads a list of field names, lower-cased.
pub fn field_names(value: &Value) -> Result<Vec<http::HeaderName>, String> {
    names(value)?
        .into_iter()
        .map(|name| {
            http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("{name:?} is not a field name"))
        })
        .collect()
}

/// Client-sent fields the proxy removes unless `origin.trusted_forwarding_headers` lists them: the
/// forwarding family, the client-address and scheme fields that web frameworks and CDNs trust, and
/// the method overrides. None is in the cache key, and an origin that reflects
/// one into a response (or, for an override, runs another method) would let one client poison the
/// cache for everyone.
pub const FORWARDING_HEADERS: &[&str] = &[
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-prefix",
    "x-forwarded-proto",
    "x-forwarded-scheme",
    "x-forwarded-server",
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-rewrite-url",
    "x-real-ip",
    "x-client-ip",
    "client-ip",
    "true-client-ip",
    "cf-connecting-ip",
    "fastly-client-ip",
    "x-cluster-client-ip",
    "x-forwarded",
    "forwarded-for",
    "x-forwarded-ssl",
    "x-url-scheme",
    "front-end-https",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Reads a list of forwarding field names, each one of [`FORWARDING_HEADERS`].
pub fn forwarding_headers(value: &Value) -> Result<Vec<http::HeaderName>, String> {
    let names = list(
        value,
        "a list of field names like [\"x-forwarded-host\"]",
        |item| item.as_str().map(str::to_ascii_lowercase),
    )?;
    names
        .into_iter()
        .map(|name| match FORWARDING_HEADERS.contains(&name.as_str()) {
            true => http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a field name")),
            false => Err(format!(
                "{name:?} is not a forwarding field the proxy removes; expected some of {}",
                FORWARDING_HEADERS.join(", ")
            )),
        })
        .collect()
}

/// Reads targeted cache-control field names (RFC 9213): valid field names, none of them a field
/// with a meaning of its own (`Cache-Control`, `Expires`, ...), none twice.
pub fn targeted_fields(value: &Value) -> Result<Vec<http::HeaderName>, String> {
    let names = list(
        value,
        "a list of field names like [\"CDN-Cache-Control\"]",
        |item| item.as_str().map(|name| name.trim().to_ascii_lowercase()),
    )?;
    let mut fields: Vec<http::HeaderName> = Vec::with_capacity(names.len());
    for name in names {
        let field = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a field name"))?;
        if RESERVED_FOR_TARGETING.contains(&name.as_str()) {
            return Err(format!(
                "{name:?} has a meaning of its own and cannot be a targeted field"
            ));
        }
        if fields.contains(&field) {
            return Err(format!("{name:?} is listed twice"));
        }
        fields.push(field);
    }
    Ok(fields)
}

/// Fields a targeted list must not name: they already say how to cache.
const RESERVED_FOR_TARGETING: [&str; 5] = ["cache-control", "expires", "pragma", "age", "vary"];

fn list<T>(
    value: &Value,
    expected: &str,
    read: impl Fn(&Value) -> Option<T>,
) -> Result<Vec<T>, String> {
    let Value::Array(items) = value else {
        return Err(format!("expected {expected}, got {}", shown(value)));
    };
    items
        .iter()
        .map(|item| {
            read(item)
                .ok_or_else(|| format!("expected {expected}, got {} in the list", shown(item)))
        })
        .collect()
}

/// Reads the origin URL: `http://host:port`, with an empty or `/` path and no query.
pub fn origin_url(value: &Value) -> Result<Uri, String> {
    let expected = || {
        format!(
            "expected a URL like \"http://127.0.0.1:8081\" or \"https://origin.example\", got {}",
            shown(value)
        )
    };
    let text = value.as_str().ok_or_else(expected)?;
    let uri: Uri = text.trim().parse().map_err(|_| expected())?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {}
        _ => return Err(expected()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(expected());
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "the origin URL must not have a path or query (requests keep their own), got {}",
            shown(value)
        ));
    }
    Ok(uri)
}

/// Reads a file path: a non-empty string.
pub fn file_path(value: &Value) -> Result<std::path::PathBuf, String> {
    match value.as_str() {
        Some(path) if !path.is_empty() => Ok(std::path::PathBuf::from(path)),
        _ => Err(format!("expected a file path, got {}", shown(value))),
    }
}

/// Reads one field name, lower-cased.
pub fn field_name(value: &Value) -> Result<http::HeaderName, String> {
    let name = value.as_str().ok_or_else(|| {
        format!(
            "expected a field name like \"Surrogate-Key\", got {}",
            shown(value)
        )
    })?;
    http::HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
        .map_err(|_| format!("{name:?} is not a field name"))
}

/// Reads a boolean.
pub fn boolean(value: &Value) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| format!("expected true or false, got {}", shown(value)))
}

/// Reads a non-negative integer that fits a `usize`.
pub fn count_usize(value: &Value) -> Result<usize, String> {
    let n = count(value)?;
    usize::try_from(n).map_err(|_| format!("{n} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Value {
        Value::String(s.to_owned())
    }

    #[test]
    fn sizes_are_integers_or_strings_with_a_unit() {
        assert_eq!(size(&text("512MB")), Ok(512_000_000));
        assert_eq!(size(&text("0.5KiB")), Ok(512));
        assert_eq!(size(&Value::Integer(4096)), Ok(4096));
    }

    #[test]
    fn bad_sizes_are_quoted_in_the_error() {
        assert_eq!(
            size(&text("lots")),
            Err("expected a size like \"512MiB\", got \"lots\"".to_owned())
        );
        assert!(size(&text("1G")).is_err());
        assert!(size(&Value::Integer(-1)).is_err());
        assert!(size(&Value::Float(1.5)).is_err());
        assert!(size(&Value::Boolean(true)).is_err());
    }

    #[test]
    fn durations_use_humantime() {
        assert_eq!(duration(&text("2s")), Ok(Duration::from_secs(2)));
        assert_eq!(duration(&text("150ms")), Ok(Duration::from_millis(150)));
        assert_eq!(duration(&text("1h")), Ok(Duration::from_secs(3600)));
        assert_eq!(duration(&text("1m 30s")), Ok(Duration::from_secs(90)));
    }

    #[test]
    fn durations_without_a_unit_are_rejected() {
        let err = duration(&Value::Integer(10)).unwrap_err();
        assert!(err.contains("needs a unit"), "{err}");
        assert!(duration(&text("10")).is_err());
        assert!(duration(&text("soon")).is_err());
        assert!(
            positive_duration(&text("0s"))
                .unwrap_err()
                .contains("greater than 0")
        );
    }

    #[test]
    fn socket_addresses_take_v4_and_v6() {
        assert_eq!(
            socket_addr(&text("127.0.0.1:8080")),
            Ok("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(
            socket_addr(&text("[::1]:8080")),
            Ok("[::1]:8080".parse().unwrap())
        );
        assert!(socket_addr(&text("localhost:8080")).is_err());
        assert!(socket_addr(&text("127.0.0.1")).is_err());
        assert!(socket_addr(&Value::Integer(8080)).is_err());
    }

    #[test]
    fn networks_take_cidr_and_bare_addresses() {
        let value: Value =
            Value::Array(vec![text("127.0.0.0/8"), text("::1/128"), text("10.1.2.3")]);
        let nets = networks(&value).unwrap();
        assert_eq!(nets.len(), 3);
        assert!(nets[0].contains(&"127.9.9.9".parse::<IpAddr>().unwrap()));
        assert_eq!(nets[2], "10.1.2.3/32".parse::<IpNet>().unwrap());
        let err = networks(&Value::Array(vec![text("10.0.0.0/33")])).unwrap_err();
        assert!(err.contains("\"10.0.0.0/33\""), "{err}");
        assert!(networks(&text("10.0.0.0/8")).is_err());
    }

    #[test]
    fn origin_url_is_http_or_https_without_a_path() {
        let uri = origin_url(&text("http://127.0.0.1:8081")).unwrap();
        assert_eq!(uri.port_u16(), Some(8081));
        assert!(origin_url(&text("http://origin.internal/")).is_ok());
        assert!(origin_url(&text("https://example.com")).is_ok());
        assert!(origin_url(&text("ftp://example.com")).is_err());
        assert!(
            origin_url(&text("http://example.com/api"))
                .unwrap_err()
                .contains("path")
        );
        assert!(origin_url(&text("http://example.com/?a=1")).is_err());
        assert!(origin_url(&text("127.0.0.1:8081")).is_err());
        assert!(origin_url(&text("ftp://example.com")).is_err());
        assert!(origin_url(&text("/just/a/path")).is_err());
    }

    #[test]
    fn numbers_are_floats_or_integers() {
        assert_eq!(number(&Value::Float(0.01)), Ok(0.01));
        assert_eq!(number(&Value::Integer(1)), Ok(1.0));
        assert_eq!(
            number(&text("0.5")),
            Err("expected a number like 0.01, got \"0.5\"".to_owned())
        );
    }
}
