//! The cache directives a response gives bloomgate and those a request gives it (RFC 9111
//! section 5.2), read as a shared cache must: directive names in any case, arguments as token or
//! quoted string, and a targeted field (RFC 9213) in place of `Cache-Control` and `Expires` when
//! one the configuration names is present with a valid, non-empty value.

use std::borrow::Cow;

use http::header::{self, HeaderMap, HeaderName};

use super::field::{self, combined};

/// A delta-seconds argument (RFC 9111 section 1.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    Seconds(u64),
    /// Not a non-negative integer: the freshness it would give is treated as none (RFC 9111
    /// section 4.2.1 encourages treating invalid freshness information as stale).
    Invalid,
}

impl Delta {
    /// Seconds, or zero when invalid.
    pub fn seconds(self) -> u64 {
        match self {
            Delta::Seconds(seconds) => seconds,
            Delta::Invalid => 0,
        }
    }
}

/// The largest delta-seconds a cache must represent; larger values count as this (RFC 9111
/// section 1.2.2).
const DELTA_MAX: u64 = 2_147_483_648;

/// Parses delta-seconds: one or more digits, nothing else.
pub fn delta_seconds(text: &str) -> Delta {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Delta::Invalid;
    }
    // Digits only: a parse error can only be overflow.
    Delta::Seconds(text.parse::<u64>().map_or(DELTA_MAX, |n| n.min(DELTA_MAX)))
}

/// Where a response's directives were read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    CacheControl,
    /// A targeted field (RFC 9213): `Cache-Control` and `Expires` were ignored for caching.
    Targeted(HeaderName),
}

/// The response directives bloomgate acts on (RFC 9111 section 5.2.2 and RFC 5861).
///
/// The qualified forms `no-cache="field"` and `private="field"` are treated as their unqualified
/// forms: stricter, and never wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResponseDirectives {
    pub no_store: bool,
    pub no_cache: bool,
    pub private: bool,
    pub public: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub must_understand: bool,
    pub max_age: Option<Delta>,
    pub s_maxage: Option<Delta>,
    pub stale_while_revalidate: Option<Delta>,
    pub stale_if_error: Option<Delta>,
}

/// A directive's argument, as either syntax gave it.
enum Argument<'a> {
    None,
    Text(&'a str),
    Integer(i64),
    /// An argument of a type no directive here takes (a decimal, a byte sequence...).
    Other,
}

impl ResponseDirectives {
    /// Records one directive; for a directive given twice, the first occurrence counts (RFC 9111
    /// section 4.2.1 allows using the first).
    fn set(&mut self, name: &str, argument: Argument<'_>) {
        let delta = || match &argument {
            Argument::Text(text) => delta_seconds(text),
            Argument::Integer(n) => {
                u64::try_from(*n).map_or(Delta::Invalid, |n| Delta::Seconds(n.min(DELTA_MAX)))
            }
            Argument::None | Argument::Other => Delta::Invalid,
        };
        match name {
            "no-store" => self.no_store = true,
            "no-cache" => self.no_cache = true,
            "private" => self.private = true,
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "must-understand" => self.must_understand = true,
            "max-age" => _ = self.max_age.get_or_insert_with(delta),
            "s-maxage" => _ = self.s_maxage.get_or_insert_with(delta),
            "stale-while-revalidate" => _ = self.stale_while_revalidate.get_or_insert_with(delta),
            "stale-if-error" => _ = self.stale_if_error.get_or_insert_with(delta),
            _ => {}
        }
    }

    /// Whether a stale copy may ever be served without validating it first (RFC 9111 section
    /// 4.2.4): not after `no-cache`, `must-revalidate` or `proxy-revalidate`.
    ///
    /// `s-maxage` implies `proxy-revalidate` for a shared cache, except where the origin grants
    /// stale use explicitly with `stale-while-revalidate` or `stale-if-error` (RFC 5861), as
    /// CDNs read `s-maxage=60, stale-while-revalidate=30`.
    pub fn forbids_stale(&self) -> bool {
        let grants_stale = self.stale_while_revalidate.is_some() || self.stale_if_error.is_some();
        self.no_cache
            || self.must_revalidate
            || self.proxy_revalidate
            || (self.s_maxage.is_some() && !grants_stale)
    }
}

/// A response's directives and where they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseControl {
    pub directives: ResponseDirectives,
    pub source: Source,
    /// A route's policy set the lifetime, or ignores `Expires` (see `cache::policy`).
    pub expires_ignored: bool,
}

impl ResponseControl {
    /// The directives of `headers`: from the first field of `targeted` present with a valid,
    /// non-empty value (RFC 9213 section 2.1), else from `Cache-Control`.
    pub fn of(headers: &HeaderMap, targeted: &[HeaderName]) -> ResponseControl {
        for name in targeted {
            if let Some(directives) = targeted_directives(headers, name) {
                return ResponseControl {
                    directives,
                    source: Source::Targeted(name.clone()),
                    expires_ignored: false,
                };
            }
        }
        let mut directives = ResponseDirectives::default();
        for (name, argument) in cache_control(headers) {
            directives.set(&name, argument_of(argument.as_deref()));
        }
        ResponseControl {
            directives,
            source: Source::CacheControl,
            expires_ignored: false,
        }
    }

    /// Whether `Expires` counts: not when a targeted field decided (RFC 9213 section 2.1), nor when
    /// a route's policy set the lifetime or ignores it.
    pub fn reads_expires(&self) -> bool {
        self.source == Source::CacheControl && !self.expires_ignored
    }

    /// Whether a targeted field decided.
    pub fn is_targeted(&self) -> bool {
        self.targeted_field().is_some()
    }

    /// The targeted field that decided, if one did.
    pub fn targeted_field(&self) -> Option<&HeaderName> {
        match &self.source {
            Source::Targeted(name) => Some(name),
            Source::CacheControl => None,
        }
    }
}

fn argument_of(text: Option<&str>) -> Argument<'_> {
    text.map_or(Argument::None, Argument::Text)
}

/// The directives of one targeted field, if it is present, parses as a Structured Fields
/// Dictionary (RFC 8941; its lines joined) and has at least one member.
fn targeted_directives(headers: &HeaderMap, name: &HeaderName) -> Option<ResponseDirectives> {
    let value = combined(headers, name)?;
    let dictionary: sfv::Dictionary = sfv::Parser::new(value.as_bytes()).parse().ok()?;
    if dictionary.is_empty() {
        return None;
    }
    let mut directives = ResponseDirectives::default();
    for (key, member) in &dictionary {
        // Parameters are ignored (RFC 9213 section 2.2); an inner list is no directive's value.
        let argument = match member {
            sfv::ListEntry::Item(item) => match &item.bare_item {
                sfv::BareItem::Boolean(true) => Argument::None,
                sfv::BareItem::Boolean(false) => continue,
                sfv::BareItem::Integer(n) => Argument::Integer(i64::from(*n)),
                sfv::BareItem::String(text) => Argument::Text(text.as_str()),
                sfv::BareItem::Token(token) => Argument::Text(token.as_str()),
                _ => Argument::Other,
            },
            sfv::ListEntry::InnerList(_) => Argument::Other,
        };
        // A string argument is not an integer: `max-age="60"` is invalid in a targeted field.
        let argument = match (key.as_str(), argument) {
            (
                "max-age" | "s-maxage" | "stale-while-revalidate" | "stale-if-error",
                Argument::Text(_),
            ) => Argument::Other,
            (_, argument) => argument,
        };
        directives.set(key.as_str(), argument);
    }
    Some(directives)
}

/// The request directives bloomgate acts on (RFC 9111 section 5.2.1), with `Pragma: no-cache`
/// counting as `no-cache` when the request has no `Cache-Control` (section 5.4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDirectives {
    pub no_cache: bool,
    pub no_store: bool,
    pub max_age: Option<Delta>,
    pub min_fresh: Option<Delta>,
    /// `max-stale`, with its argument if it has one (none: any staleness).
    pub max_stale: Option<Option<Delta>>,
    pub only_if_cached: bool,
}

impl RequestDirectives {
    pub fn of(headers: &HeaderMap) -> RequestDirectives {
        let mut directives = RequestDirectives::default();
        if !headers.contains_key(header::CACHE_CONTROL) {
            directives.no_cache = headers
                .get_all(header::PRAGMA)
                .iter()
                .filter_map(|value| value.to_str().ok())
                .flat_map(|value| value.split(','))
                .any(|part| part.trim().eq_ignore_ascii_case("no-cache"));
            return directives;
        }
        for (name, argument) in cache_control(headers) {
            let delta = || argument.as_deref().map_or(Delta::Invalid, delta_seconds);
            match &*name {
                "no-cache" => directives.no_cache = true,
                "no-store" => directives.no_store = true,
                "only-if-cached" => directives.only_if_cached = true,
                "max-age" => _ = directives.max_age.get_or_insert_with(delta),
                "min-fresh" => _ = directives.min_fresh.get_or_insert_with(delta),
                "max-stale" => {
                    let limit = argument.as_deref().map(delta_seconds);
                    _ = directives.max_stale.get_or_insert(limit);
                }
                _ => {}
            }
        }
        directives
    }

    /// Whether the request says nothing that changes how a stored response is chosen.
    pub fn is_plain(&self) -> bool {
        *self == RequestDirectives::default()
    }
}

/// The directives of every `Cache-Control` line, names lower-cased (RFC 9111 section 5.2: names
/// are case-insensitive), arguments unquoted; commas inside a quoted string do not split.
///
/// Borrowed from the field where it can be (a name already in lower case, a token, a quoted
/// string without escapes): every response and most requests are read here, and the usual
/// `public, max-age=3600` cost four allocations when each part was a `String`.
pub fn cache_control(headers: &HeaderMap) -> Vec<(Cow<'_, str>, Option<Cow<'_, str>>)> {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(split_list)
        .filter_map(|member| {
            let (name, argument) = match member.split_once('=') {
                Some((name, argument)) => (name, Some(unquote(argument.trim()))),
                None => (member, None),
            };
            let name = name.trim();
            (!name.is_empty()).then(|| (lower_case(name), argument))
        })
        .collect()
}

fn lower_case(name: &str) -> Cow<'_, str> {
    match name.bytes().any(|byte| byte.is_ascii_uppercase()) {
        true => Cow::Owned(name.to_ascii_lowercase()),
        false => Cow::Borrowed(name),
    }
}

/// The members of a comma-separated list, trimmed, empty ones dropped; a comma inside a quoted
/// string belongs to the string.
fn split_list(value: &str) -> impl Iterator<Item = &str> {
    field::split_outside_quotes(value, b',')
        .map(str::trim)
        .filter(|member| !member.is_empty())
}

/// A token as it is, or a quoted string's content with its escapes removed.
fn unquote(argument: &str) -> Cow<'_, str> {
    let Some(inner) = argument
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return Cow::Borrowed(argument);
    };
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    let mut text = String::with_capacity(inner.len());
    let mut escaped = false;
    for c in inner.chars() {
        if !escaped && c == '\\' {
            escaped = true;
            continue;
        }
        escaped = false;
        text.push(c);
    }
    Cow::Owned(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::field::lines as headers;
    use http::HeaderValue;

    fn response(pairs: &[(&'static str, &'static str)]) -> ResponseDirectives {
        ResponseControl::of(&headers(pairs), &[]).directives
    }

    #[test]
    fn directive_names_are_case_insensitive() {
        let d = response(&[("cache-control", "MaX-AgE=60, No-CaChE, Private, S-MaxAge=5")]);
        assert_eq!(d.max_age, Some(Delta::Seconds(60)));
        assert_eq!(d.s_maxage, Some(Delta::Seconds(5)));
        assert!(d.no_cache && d.private);
        assert!(response(&[("cache-control", "No-Store")]).no_store);
    }

    #[test]
    fn delta_seconds_are_digits_only_and_saturate() {
        assert_eq!(delta_seconds("003600"), Delta::Seconds(3600));
        assert_eq!(
            delta_seconds("99999999999999999999999"),
            Delta::Seconds(DELTA_MAX)
        );
        for bad in ["", "3600.0", "a3600", "3600a", "-1", "'3600'", " 1"] {
            assert_eq!(delta_seconds(bad), Delta::Invalid, "{bad:?}");
        }
        let quoted = response(&[("cache-control", "max-age=\"3600\"")]);
        assert_eq!(quoted.max_age, Some(Delta::Seconds(3600)));
        // A quoted-pair stands for its character (RFC 9110 section 5.6.4).
        let escaped = response(&[("cache-control", "max-age=\"36\\00\"")]);
        assert_eq!(escaped.max_age, Some(Delta::Seconds(3600)));
    }

    #[test]
    fn the_first_of_two_arguments_counts_and_quoted_commas_do_not_split() {
        let d = response(&[
            ("cache-control", "max-age=1800"),
            ("cache-control", "max-age=1"),
        ]);
        assert_eq!(d.max_age, Some(Delta::Seconds(1800)));
        let d = response(&[(
            "cache-control",
            "extension=\"max-age=3600, no-store\", max-age=1",
        )]);
        assert_eq!(d.max_age, Some(Delta::Seconds(1)));
        assert!(!d.no_store);
    }

    #[test]
    fn a_valid_targeted_field_replaces_cache_control() {
        let cdn = HeaderName::from_static("cdn-cache-control");
        let ours = HeaderName::from_static("bloomgate-cache-control");
        let targets = [ours.clone(), cdn.clone()];
        let both = headers(&[
            ("cache-control", "no-store"),
            ("cdn-cache-control", "max-age=600, stale-if-error=30"),
        ]);
        let control = ResponseControl::of(&both, &targets);
        assert_eq!(control.source, Source::Targeted(cdn.clone()));
        assert!(!control.directives.no_store);
        assert_eq!(control.directives.max_age, Some(Delta::Seconds(600)));
        assert!(!control.reads_expires());

        let mut first = both.clone();
        first.insert(&ours, HeaderValue::from_static("no-store"));
        let control = ResponseControl::of(&first, &targets);
        assert_eq!(control.source, Source::Targeted(ours));
        assert!(control.directives.no_store);
    }

    #[test]
    fn an_invalid_or_empty_targeted_field_is_ignored() {
        let cdn = [HeaderName::from_static("cdn-cache-control")];
        for bad in ["max-age=10000, &&&&&", "MaX-aGe=60", ""] {
            let fields = headers(&[("cache-control", "no-store"), ("cdn-cache-control", bad)]);
            let control = ResponseControl::of(&fields, &cdn);
            assert_eq!(control.source, Source::CacheControl, "{bad:?}");
            assert!(control.directives.no_store);
        }
        // Valid, but a string is not a delta: the field decides, with no freshness.
        let fields = headers(&[
            ("cache-control", "max-age=60"),
            ("cdn-cache-control", "max-age=\"10000\""),
        ]);
        let control = ResponseControl::of(&fields, &cdn);
        assert!(control.is_targeted());
        assert_eq!(control.directives.max_age, Some(Delta::Invalid));
    }

    #[test]
    fn request_directives_and_pragma() {
        let plain = RequestDirectives::of(&headers(&[("cache-control", "nothing-to-see-here")]));
        assert!(plain.is_plain());
        let pragma = RequestDirectives::of(&headers(&[("pragma", "No-Cache")]));
        assert!(pragma.no_cache);
        let both = RequestDirectives::of(&headers(&[
            ("pragma", "no-cache"),
            ("cache-control", "max-stale, Min-Fresh=5"),
        ]));
        assert!(!both.no_cache, "Pragma is ignored beside Cache-Control");
        assert_eq!(both.max_stale, Some(None));
        assert_eq!(both.min_fresh, Some(Delta::Seconds(5)));
    }

    #[test]
    fn s_maxage_forbids_stale_unless_a_stale_extension_grants_it() {
        assert!(response(&[("cache-control", "s-maxage=60")]).forbids_stale());
        let granted = response(&[("cache-control", "s-maxage=60, stale-while-revalidate=30")]);
        assert!(!granted.forbids_stale());
        let strict = response(&[(
            "cache-control",
            "max-age=60, must-revalidate, stale-if-error=9",
        )]);
        assert!(strict.forbids_stale());
    }
}
