//! nginx's `$time_local` (`10/Oct/2000:13:55:36 -0700`) read as seconds since the Unix epoch, and
//! the day arithmetic of the proleptic Gregorian calendar both ways, which the access log's writer
//! uses too.

/// Seconds since the Unix epoch of nginx's `$time_local`, e.g. `10/Oct/2000:13:55:36 -0700`.
#[cfg(feature = "tools")]
pub(super) fn parse_nginx_time(text: &str) -> Option<f64> {
    let (date_time, zone) = text.split_once(' ')?;
    let mut parts = date_time.splitn(4, [':', '/']);
    let day: i64 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.splitn(3, ':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock.next()?.parse().ok()?;
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as i64 + 1;
    // Four-digit years keep `days_from_civil` far from overflow; an ASCII zone keeps the slices
    // below on character boundaries.
    let in_range = (1..=9999).contains(&year)
        && zone.len() == 5
        && zone.is_ascii()
        && (1..=31).contains(&day)
        && hour <= 23
        && minute <= 59
        && second <= 60;
    if !in_range {
        return None;
    }
    let sign = match &zone[..1] {
        "+" => 1,
        "-" => -1,
        _ => return None,
    };
    let zone_hours: i64 = zone[1..3].parse().ok()?;
    let zone_minutes: i64 = zone[3..5].parse().ok()?;
    let offset = sign * (zone_hours * 3600 + zone_minutes * 60);
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second - offset) as f64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
#[cfg(feature = "tools")]
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, the inverse of [`days_from_civil`]).
pub(super) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

// The tests are of the trace reader's time parsing, a part of the tools.
#[cfg(all(test, feature = "tools"))]
mod tests {
    use super::*;

    #[test]
    fn nginx_time_is_utc_epoch_seconds() {
        assert_eq!(parse_nginx_time("01/Jan/1970:00:00:00 +0000"), Some(0.0));
        assert_eq!(
            parse_nginx_time("10/Oct/2000:13:55:36 -0700"),
            Some(971_211_336.0)
        );
        assert_eq!(parse_nginx_time("10/Foo/2000:13:55:36 -0700"), None);
    }

    #[test]
    fn nginx_time_out_of_range_is_rejected_not_a_panic() {
        // Found by the fuzz harness: the year overflowed the day count.
        assert_eq!(
            parse_nginx_time("10/Oct/266666666666666000:13:55:36 -0700"),
            None
        );
        assert_eq!(parse_nginx_time("10/Oct/10000:13:55:36 -0700"), None);
        assert_eq!(parse_nginx_time("10/Oct/2000:13:55:36 +0\u{e9}0"), None);
        assert_eq!(parse_nginx_time("10/Oct/2000:13:55:36 \u{e9}000"), None);
        assert!(parse_nginx_time("31/Dec/9999:23:59:59 +0000").is_some());
    }

    #[test]
    fn civil_dates_round_trip_through_the_day_count() {
        for days in [-719_468, -1, 0, 59, 365, 11_016, 19_999, 2_932_896] {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
        }
    }
}
