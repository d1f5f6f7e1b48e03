//! Reading a response's `Cache-Status` (RFC 9211): was it a hit, and if not, why not stored.

/// One cache's entry in a `Cache-Status` header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheStatus {
    /// The cache's name, the list member's first item (`bloomgate`).
    pub cache: String,
    /// The `hit` parameter: served from the cache without going forward.
    pub hit: bool,
    /// The `fwd` parameter: why the request went forward (`miss`, `stale`, `uri-miss`, ...).
    pub fwd: Option<String>,
    /// The `stored` parameter: the forwarded response was stored.
    pub stored: bool,
    /// The `detail` parameter: bloomgate's reason for not storing (`first-hit`, `no-store`, ...).
    pub detail: Option<String>,
}

impl CacheStatus {
    /// Parses one list member: `name; hit` or `name; fwd=miss; stored; detail=first-hit`.
    pub fn parse_member(member: &str) -> Option<CacheStatus> {
        let mut items = split_outside_quotes(member, ';').into_iter().map(str::trim);
        let cache = unquote(items.next()?);
        if cache.is_empty() {
            return None;
        }
        let mut status = CacheStatus {
            cache: cache.to_owned(),
            ..CacheStatus::default()
        };
        for item in items {
            let (name, value) = item
                .split_once('=')
                .map_or((item, None), |(n, v)| (n, Some(v)));
            let value = value.map(|v| unquote(v.trim()).to_owned());
            match name.trim() {
                // A boolean parameter is true when bare or `=?1`.
                "hit" => status.hit = value.is_none_or(|v| v == "?1"),
                "stored" => status.stored = value.is_none_or(|v| v == "?1"),
                "fwd" => status.fwd = value,
                "detail" => status.detail = value,
                _ => {}
            }
        }
        Some(status)
    }

    /// The status of the cache named `name` in the header's values, or else of the cache
    /// closest to the client (the last list member, RFC 9211 section 2).
    pub fn from_header_values<'a>(
        values: impl IntoIterator<Item = &'a str>,
        name: &str,
    ) -> Option<CacheStatus> {
        let members: Vec<CacheStatus> = values
            .into_iter()
            .flat_map(|value| split_outside_quotes(value, ','))
            .filter_map(CacheStatus::parse_member)
            .collect();
        let named = members.iter().rposition(|member| member.cache == name);
        let index = named.or_else(|| members.len().checked_sub(1))?;
        members.into_iter().nth(index)
    }

    /// Why a miss was a miss, for the report: `detail`, else `stored`, else `fwd`.
    pub fn miss_reason(&self) -> &str {
        match (&self.detail, self.stored, &self.fwd) {
            (Some(detail), _, _) => detail,
            (None, true, _) => "stored",
            (None, false, Some(fwd)) => fwd,
            (None, false, None) => "unknown",
        }
    }
}

fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (index, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == separator && !quoted => {
                parts.push(&text[start..index]);
                start = index + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_is_read() {
        let status = CacheStatus::parse_member("bloomgate; hit").unwrap();
        assert!(status.hit);
        assert_eq!(status.cache, "bloomgate");
        assert_eq!(status.fwd, None);
    }

    #[test]
    fn a_miss_carries_its_reason() {
        let first = CacheStatus::parse_member("bloomgate; fwd=miss; detail=first-hit").unwrap();
        assert!(!first.hit && !first.stored);
        assert_eq!(first.fwd.as_deref(), Some("miss"));
        assert_eq!(first.miss_reason(), "first-hit");
        let stored = CacheStatus::parse_member("bloomgate; fwd=miss; stored").unwrap();
        assert_eq!(stored.miss_reason(), "stored");
        let stale = CacheStatus::parse_member("bloomgate;fwd=stale").unwrap();
        assert_eq!(stale.miss_reason(), "stale");
        let quoted =
            CacheStatus::parse_member(r#"bloomgate; fwd=uri-miss; detail="too large; 9 MB""#)
                .unwrap();
        assert_eq!(quoted.detail.as_deref(), Some("too large; 9 MB"));
    }

    #[test]
    fn the_named_cache_is_chosen_among_several() {
        let values = [
            "OriginCache; hit, bloomgate; fwd=miss; stored",
            "CDN; fwd=miss",
        ];
        let ours = CacheStatus::from_header_values(values, "bloomgate").unwrap();
        assert_eq!(ours.cache, "bloomgate");
        assert!(ours.stored);
        let closest = CacheStatus::from_header_values(values, "other").unwrap();
        assert_eq!(closest.cache, "CDN");
        assert_eq!(CacheStatus::from_header_values([""], "bloomgate"), None);
    }
}
