//! A request's byte range in a trace: the `range` column's `bytes=first-last` read against the
//! object's size.

/// The bytes `first..=last` of an object (RFC 9110 §14.1.2), both within its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub first: u64,
    pub last: u64,
}

impl ByteRange {
    /// Bytes in the range: at least one.
    pub fn length(&self) -> u64 {
        self.last - self.first + 1
    }

    /// The range as a `Range` header value: `bytes=first-last`.
    pub fn header_value(&self) -> String {
        format!("bytes={}-{}", self.first, self.last)
    }
}

/// A range as written, before the object's size is known: `first-last`, `first-` or `-suffix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RangeSpec {
    FromTo(u64, u64),
    From(u64),
    Suffix(u64),
}

impl RangeSpec {
    /// Reads `bytes=first-last` (the `bytes=` is optional), `first-` or `-suffix`: one range.
    pub(super) fn parse(field: &str) -> Result<RangeSpec, String> {
        let spec = field.strip_prefix("bytes=").unwrap_or(field);
        let bad = || format!("{field:?} is not bytes=first-last, first- or -suffix");
        let (first, last) = spec.split_once('-').ok_or_else(bad)?;
        let number = |text: &str| text.parse::<u64>().map_err(|_| bad());
        match (first.is_empty(), last.is_empty()) {
            (false, false) => {
                let (first, last) = (number(first)?, number(last)?);
                if last < first {
                    return Err(format!("{field:?} ends before it starts"));
                }
                Ok(RangeSpec::FromTo(first, last))
            }
            (false, true) => Ok(RangeSpec::From(number(first)?)),
            (true, false) => Ok(RangeSpec::Suffix(number(last)?)),
            (true, true) => Err(bad()),
        }
    }

    /// The bytes of an object of `size` bytes this asks for, cut to its end; an error for a
    /// range that starts past the end (what an origin answers 416).
    pub(super) fn resolve(self, size: u64) -> Result<ByteRange, String> {
        let unsatisfiable = || format!("no byte of it is within the object's {size} bytes");
        let end = size.checked_sub(1).ok_or_else(unsatisfiable)?;
        match self {
            RangeSpec::FromTo(first, _) | RangeSpec::From(first) if first > end => {
                Err(unsatisfiable())
            }
            RangeSpec::FromTo(first, last) => Ok(ByteRange {
                first,
                last: last.min(end),
            }),
            RangeSpec::From(first) => Ok(ByteRange { first, last: end }),
            RangeSpec::Suffix(0) => Err(unsatisfiable()),
            RangeSpec::Suffix(suffix) => Ok(ByteRange {
                first: size.saturating_sub(suffix),
                last: end,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(field: &str, size: u64) -> Result<(u64, u64), String> {
        let range = RangeSpec::parse(field)?.resolve(size)?;
        Ok((range.first, range.last))
    }

    #[test]
    fn each_form_of_range_reads_as_rfc_9110_says() {
        assert_eq!(resolved("bytes=0-99", 1000), Ok((0, 99)));
        assert_eq!(resolved("10-", 1000), Ok((10, 999)));
        assert_eq!(resolved("bytes=-100", 1000), Ok((900, 999)));
        assert_eq!(resolved("-5000", 1000), Ok((0, 999)));
        assert_eq!(resolved("990-2000", 1000), Ok((990, 999)));
    }

    #[test]
    fn a_range_past_the_end_or_backwards_is_an_error_naming_it() {
        assert!(
            resolved("1000-1001", 1000)
                .unwrap_err()
                .contains("1000 bytes")
        );
        assert!(resolved("5-4", 1000).unwrap_err().contains("\"5-4\""));
        assert!(resolved("-", 1000).is_err());
        assert!(resolved("a-b", 1000).is_err());
        assert!(resolved("-0", 1000).is_err());
    }
}
