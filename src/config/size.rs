//! Byte sizes as the config file and the command line write them: `"512MiB"`, `"1.5GB"`, `"100"`.

/// Text that [`parse_size`] cannot read as a size, quoted as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected a size like \"512MiB\" (KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB, TB powers of 1000), got {0:?}"
)]
pub struct SizeError(pub String);

/// Reads a byte size: a number of bytes with an optional unit, `"512MiB"`, `"64KiB"`, `"1.5GB"`, `"100"`.
///
/// KiB, MiB, GiB and TiB are powers of 1024; KB, MB, GB and TB are powers of 1000 (as
/// docs/configuration.md documents). Units are case-insensitive and may be separated from the
/// number by spaces. A fractional size rounds down to whole bytes.
///
/// # Examples
/// ```
/// use bloomgate::config::parse_size;
///
/// assert_eq!(parse_size("512MB"), Ok(512_000_000));
/// assert_eq!(parse_size("512MiB"), Ok(512 << 20));
/// assert!(parse_size("1G").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    read(text).ok_or_else(|| SizeError(text.to_owned()))
}

fn read(text: &str) -> Option<u64> {
    let text = text.trim();
    let unit_start = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(unit_start);
    let multiplier: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    match number.split_once('.') {
        None => number.parse::<u64>().ok()?.checked_mul(multiplier),
        Some(_) => {
            let bytes = number.parse::<f64>().ok()? * multiplier as f64;
            (bytes < u64::MAX as f64).then_some(bytes as u64)
        }
    }
}

/// Formats a byte count with the largest binary unit that divides it, as the config file writes it.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map_or_else(
            || format!("{bytes}B"),
            |(unit, name)| format!("{}{name}", bytes / unit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512MB"), Ok(512_000_000));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("8 mib"), Ok(8 << 20));
        assert_eq!(parse_size("2KB"), Ok(2_000));
        assert_eq!(parse_size("0.5KiB"), Ok(512));
    }

    #[test]
    fn bad_sizes_are_quoted_in_the_error() {
        let error = parse_size("1G").unwrap_err();
        assert_eq!(error, SizeError("1G".to_owned()));
        assert!(error.to_string().ends_with("got \"1G\""), "{error}");
        for bad in [
            "",
            "MiB",
            "5XB",
            "1K",
            "1.2.3MB",
            ".",
            "-5MiB",
            "99999999999999TiB",
            "1e3",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn sizes_format_with_the_largest_exact_unit() {
        assert_eq!(format_size(512 << 20), "512MiB");
        assert_eq!(format_size(64 << 10), "64KiB");
        assert_eq!(format_size(1_500_000_000), "1500000000B");
        assert_eq!(format_size(0), "0B");
    }

    #[test]
    fn formatted_sizes_read_back_as_the_same_bytes() {
        for bytes in [0, 1, 1000, 512 << 20, 1_500_000_000, u64::MAX] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
    }
}
