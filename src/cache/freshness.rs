//! How long a response stays fresh and how old it is (RFC 9111 section 4.2), fixed when it is
//! received: the freshness lifetime from `s-maxage`, `max-age`, `Expires` or a heuristic, and the
//! age it arrived with from a strictly read `Age`.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};

use super::control::{ResponseControl, delta_seconds};

/// A response's freshness lifetime and age, as received at `response_time`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// When the response was received (or refreshed by a 304).
    pub response_time: SystemTime,
    /// Its age when received, in seconds: the `Age` it came with.
    initial_age: u32,
    /// How long it is fresh, counted from its origin (RFC 9111 section 4.2.1), in seconds.
    /// Whole seconds, as every source of it is but the heuristic (kept to 24 bytes: a cache holds
    /// one per entry).
    freshness: u32,
}

/// Whole seconds, as many as a `u32` holds (136 years; RFC 9111 section 1.2.2 caps a
/// delta-seconds at 2^31).
fn seconds(duration: Duration) -> u32 {
    u32::try_from(duration.as_secs()).unwrap_or(u32::MAX)
}

/// The share of the time since `Last-Modified` a response with no explicit lifetime is fresh
/// for (RFC 9111 section 4.2.2 suggests 10%).
const HEURISTIC_FRACTION: u32 = 10;

/// `Age` in seconds (RFC 9111 section 5.1): the first member of the field, so `7200, 0` is
/// 7200 seconds old. A first member that is not a non-negative integer (`abc`, `-7200`, `7200.0`)
/// is ignored as no `Age` at all, as the cache-tests.fyi suite requires (RFC 9111 section 5.1
/// would rather have such a response stale).
fn initial_age(headers: &HeaderMap) -> Duration {
    let first = headers
        .get(header::AGE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(',').next())
        .map(str::trim)
        .unwrap_or_default();
    Duration::from_secs(delta_seconds(first).seconds())
}

impl Lifetime {
    /// The lifetime of a response with `status` and `headers`, whose directives are `control`,
    /// received at `response_time`.
    pub fn of(
        status: StatusCode,
        headers: &HeaderMap,
        control: &ResponseControl,
        response_time: SystemTime,
    ) -> Lifetime {
        Lifetime {
            response_time,
            initial_age: seconds(initial_age(headers)),
            freshness: seconds(freshness_lifetime(status, headers, control, response_time)),
        }
    }

    /// Its age when received.
    pub fn initial_age(&self) -> Duration {
        Duration::from_secs(self.initial_age.into())
    }

    /// How long it is fresh, counted from its origin.
    pub fn freshness(&self) -> Duration {
        Duration::from_secs(self.freshness.into())
    }

    /// The response's current age (RFC 9111 section 4.2.3, without the apparent age from
    /// `Date`, so a skewed origin clock cannot make everything stale).
    pub fn age(&self, now: SystemTime) -> Duration {
        self.initial_age()
            .saturating_add(now.duration_since(self.response_time).unwrap_or_default())
    }

    /// Freshness left now (zero once stale).
    pub fn time_to_live(&self, now: SystemTime) -> Duration {
        self.freshness().saturating_sub(self.age(now))
    }

    /// How long ago the response stopped being fresh (zero while fresh).
    pub fn staleness(&self, now: SystemTime) -> Duration {
        self.age(now).saturating_sub(self.freshness())
    }

    /// This lifetime cut short to end at `at`, if it was longer (a soft purge).
    pub fn ending_at(self, at: SystemTime) -> Lifetime {
        Lifetime {
            freshness: self.freshness.min(seconds(self.age(at))),
            ..self
        }
    }
}

/// RFC 9111 section 4.2.1, for a shared cache: `s-maxage`, then `max-age`, then `Expires` minus
/// `Date`, then a heuristic where one is allowed.
fn freshness_lifetime(
    status: StatusCode,
    headers: &HeaderMap,
    control: &ResponseControl,
    response_time: SystemTime,
) -> Duration {
    let directives = &control.directives;
    if let Some(delta) = directives.s_maxage.or(directives.max_age) {
        return Duration::from_secs(delta.seconds());
    }
    let date = || {
        headers
            .get(header::DATE)
            .and_then(http_date)
            .unwrap_or(response_time)
    };
    if control.reads_expires() && headers.contains_key(header::EXPIRES) {
        return match single(headers, header::EXPIRES).and_then(http_date) {
            Some(expires) => expires.duration_since(date()).unwrap_or_default(),
            // An invalid date, "0" or two different ones: already expired (section 5.3).
            None => Duration::ZERO,
        };
    }
    if !(heuristically_cacheable(status) || directives.public) {
        return Duration::ZERO;
    }
    headers
        .get(header::LAST_MODIFIED)
        .and_then(http_date)
        .and_then(|modified| date().duration_since(modified).ok())
        .map_or(Duration::ZERO, |since| since / HEURISTIC_FRACTION)
}

/// The one value of a field that must have one: `None` when its lines disagree.
fn single(headers: &HeaderMap, name: header::HeaderName) -> Option<&HeaderValue> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    lines.all(|line| line == first).then_some(first)
}

/// Whether a response's explicit freshness gives it any (used for storability).
pub fn has_explicit_freshness(headers: &HeaderMap, control: &ResponseControl) -> bool {
    let directives = &control.directives;
    directives.s_maxage.is_some()
        || directives.max_age.is_some()
        || (control.reads_expires() && headers.contains_key(header::EXPIRES))
}

/// Status codes a cache may give heuristic freshness (RFC 9110 section 15.1).
pub fn heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Final status codes whose semantics RFC 9110 defines, less the two a cache handles apart (206
/// and 304): what `must-understand` asks a cache to know (RFC 9111 section 5.2.2.3).
pub fn understood(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200..=205 | 300..=303 | 305 | 307 | 308 | 400..=417 | 421..=422 | 426 | 500..=505
    )
}

/// An HTTP-date in any of the three forms a recipient must accept (IMF-fixdate, RFC 850 and
/// asctime, RFC 9110 section 5.6.7). Letter case is forgiven; spacing, the zone and the fields'
/// widths are not, so `Thu, 18  Aug  2050 02:01:18 GMT` or a `UTC` zone is invalid.
pub fn http_date(value: &HeaderValue) -> Option<SystemTime> {
    let text = value.to_str().ok()?;
    if text
        .bytes()
        .any(|b| b.is_ascii_lowercase() || b.is_ascii_uppercase())
    {
        let canonical = canonical_case(text);
        return httpdate::parse_http_date(&canonical).ok();
    }
    httpdate::parse_http_date(text).ok()
}

/// Names in the case the date grammar spells them: `Thu`, `Thursday`, `Aug`, `GMT`.
fn canonical_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.eq_ignore_ascii_case("gmt") {
            out.push_str("GMT");
        } else {
            for (i, c) in word.chars().enumerate() {
                out.push(match i {
                    0 => c.to_ascii_uppercase(),
                    _ => c.to_ascii_lowercase(),
                });
            }
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_ascii_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &'static str) -> HeaderValue {
        HeaderValue::from_static(text)
    }

    #[test]
    fn the_three_date_forms_are_read_and_nothing_else() {
        let expected = httpdate::parse_http_date("Thu, 18 Aug 2050 02:01:18 GMT").ok();
        for good in [
            "Thu, 18 Aug 2050 02:01:18 GMT",
            "Thursday, 18-Aug-50 02:01:18 GMT",
            "Thu Aug 18 02:01:18 2050",
            "THU, 18 AUG 2050 02:01:18 gMT",
        ] {
            assert_eq!(http_date(&value(good)), expected, "{good}");
        }
        for bad in [
            "Thu, 18  Aug  2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02:01:18 UTC",
            "Thu, 18 Aug 2050 02:01:18 AEST",
            "Thu, 18 Aug 50 02:01:18 GMT",
            "Thu 18 Aug 2050 02:01:18 GMT",
            "Thu, 18-Aug-2050 02:01:18 GMT",
            "Thu, 18 Aug 2050 02.01.18 GMT",
            "Thu, 18 Aug 2050 2:01:18 GMT",
            "0",
        ] {
            assert_eq!(http_date(&value(bad)), None, "{bad}");
        }
    }

    fn lifetime(pairs: &[(&'static str, &'static str)], now: SystemTime) -> Lifetime {
        let mut headers = HeaderMap::new();
        for (name, text) in pairs {
            headers.append(*name, value(text));
        }
        let control = ResponseControl::of(&headers, &[]);
        Lifetime::of(StatusCode::OK, &headers, &control, now)
    }

    #[test]
    fn the_first_member_of_age_counts_and_an_unreadable_one_is_ignored() {
        let now = SystemTime::now();
        for (age, fresh) in [
            ("0, 7200", true),
            ("7200, 0", false),
            ("7200", false),
            ("abc", true),
            ("-7200", true),
            ("7200.0", true),
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(header::CACHE_CONTROL, value("max-age=3600"));
            headers.insert(header::AGE, HeaderValue::from_str(age).expect("value"));
            let control = ResponseControl::of(&headers, &[]);
            let life = Lifetime::of(StatusCode::OK, &headers, &control, now);
            assert_eq!(life.time_to_live(now) > Duration::ZERO, fresh, "Age: {age}");
        }
    }

    #[test]
    fn expires_counts_from_date_and_an_invalid_one_is_already_expired() {
        let now = SystemTime::now();
        let date = httpdate::fmt_http_date(now);
        let later = httpdate::fmt_http_date(now + Duration::from_secs(100));
        let mut headers = HeaderMap::new();
        headers.insert(header::DATE, HeaderValue::from_str(&date).expect("date"));
        headers.insert(
            header::EXPIRES,
            HeaderValue::from_str(&later).expect("date"),
        );
        let control = ResponseControl::of(&headers, &[]);
        let life = Lifetime::of(StatusCode::OK, &headers, &control, now);
        assert_eq!(life.freshness().as_secs(), 100);
        headers.append(header::EXPIRES, HeaderValue::from_str(&date).expect("date"));
        let two = Lifetime::of(StatusCode::OK, &headers, &control, now);
        assert_eq!(two.freshness(), Duration::ZERO, "two different Expires");
        let zero = lifetime(&[("expires", "0")], now);
        assert_eq!(zero.freshness(), Duration::ZERO);
    }

    #[test]
    fn heuristics_only_for_heuristically_cacheable_codes_or_public() {
        let now = SystemTime::now();
        let modified = httpdate::fmt_http_date(now - Duration::from_secs(1000));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::LAST_MODIFIED,
            HeaderValue::from_str(&modified).expect("date"),
        );
        let control = ResponseControl::of(&headers, &[]);
        let ok = Lifetime::of(StatusCode::OK, &headers, &control, now);
        assert_eq!(ok.freshness().as_secs(), 100);
        let error = Lifetime::of(StatusCode::INTERNAL_SERVER_ERROR, &headers, &control, now);
        assert_eq!(error.freshness(), Duration::ZERO);
        headers.insert(header::CACHE_CONTROL, value("public"));
        let control = ResponseControl::of(&headers, &[]);
        let public = Lifetime::of(StatusCode::INTERNAL_SERVER_ERROR, &headers, &control, now);
        assert_eq!(public.freshness().as_secs(), 100);
    }

    #[test]
    fn s_maxage_wins_over_max_age_which_wins_over_expires() {
        let now = SystemTime::now();
        let life = lifetime(
            &[
                ("cache-control", "max-age=10, s-maxage=20"),
                ("expires", "0"),
            ],
            now,
        );
        assert_eq!(life.freshness().as_secs(), 20);
        let life = lifetime(&[("cache-control", "max-age=10"), ("expires", "0")], now);
        assert_eq!(life.freshness().as_secs(), 10);
        let invalid = lifetime(&[("cache-control", "max-age=ten")], now);
        assert_eq!(invalid.freshness(), Duration::ZERO);
    }
}
