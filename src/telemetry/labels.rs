//! The label values of the metrics the request path counts, each an enum whose discriminant
//! indexes its series' handle; the value of each variant is written once, beside it.

use http::StatusCode;

use crate::cache::PurgeKind;

/// An enum of label values: `ALL` in declaration order, `as_str` the value each one exports.
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $value:literal,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)*
        }

        impl $name {
            /// Every value, in declaration order: a value's discriminant is its index here.
            pub const ALL: [$name; [$($value),*].len()] = [$($name::$variant),*];

            /// The value as the metric's label gives it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)*
                }
            }
        }
    };
}

label_values! {
    /// How a response counts in `bloomgate_requests_total{cache_status}`.
    pub enum Outcome {
        Hit = "hit",
        Stale = "stale",
        Collapsed = "collapsed",
        Revalidated = "revalidated",
        Miss = "miss",
        Pass = "pass",
        Error = "error",
    }
}

label_values! {
    /// The labels of `bloomgate_admission_total{decision}`; the dashboard uses these.
    pub enum DecisionLabel {
        Admitted = "admitted",
        Probation = "probation",
        /// Counted by the store when an entry moves from probation to main.
        Promoted = "promoted",
        FirstHit = "first_hit",
        NotStorable = "not_storable",
        TooLarge = "too_large",
    }
}

label_values! {
    /// The labels of `bloomgate_cached_errors_total{served}`: an error status served from the
    /// cache, or stored from the origin.
    pub enum CachedError {
        Hit = "hit",
        Stored = "stored",
    }
}

label_values! {
    /// The labels of `bloomgate_origin_requests_total{outcome}`: the class of the origin's status,
    /// or how it failed.
    pub enum OriginOutcome {
        Status2xx = "2xx",
        Status3xx = "3xx",
        Status4xx = "4xx",
        Status5xx = "5xx",
        ConnectError = "connect_error",
        Timeout = "timeout",
        TlsError = "tls_error",
        ProtocolError = "protocol_error",
        /// A body failed: the origin's after its head was forwarded, or the client's as it was sent.
        BodyError = "body_error",
    }
}

impl OriginOutcome {
    /// The class of a status the origin answered with.
    pub fn of_status(status: StatusCode) -> OriginOutcome {
        match status.as_u16() {
            200..=299 => OriginOutcome::Status2xx,
            300..=399 => OriginOutcome::Status3xx,
            400..=499 => OriginOutcome::Status4xx,
            _ => OriginOutcome::Status5xx,
        }
    }
}

label_values! {
    /// The labels of `bloomgate_purges_total{kind}` and `bloomgate_purged_entries_total{kind}`.
    pub enum PurgeLabel {
        Key = "key",
        TagHard = "tag_hard",
        TagSoft = "tag_soft",
    }
}

impl PurgeLabel {
    /// The label of a purge by tag of this kind.
    pub fn of_tag(kind: PurgeKind) -> PurgeLabel {
        match kind {
            PurgeKind::Hard => PurgeLabel::TagHard,
            PurgeKind::Soft => PurgeLabel::TagSoft,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_indexes_its_own_series() {
        for (index, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
        for (index, decision) in DecisionLabel::ALL.into_iter().enumerate() {
            assert_eq!(decision as usize, index, "{decision:?}");
        }
        for (index, served) in CachedError::ALL.into_iter().enumerate() {
            assert_eq!(served as usize, index, "{served:?}");
        }
        for (index, outcome) in OriginOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
        for (index, kind) in PurgeLabel::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, index, "{kind:?}");
        }
    }

    #[test]
    fn every_value_of_a_label_is_its_own_series() {
        fn distinct(values: Vec<&'static str>) {
            let unique: std::collections::HashSet<_> = values.iter().collect();
            assert_eq!(unique.len(), values.len(), "{values:?}");
        }
        distinct(Outcome::ALL.map(Outcome::as_str).to_vec());
        distinct(DecisionLabel::ALL.map(DecisionLabel::as_str).to_vec());
        distinct(CachedError::ALL.map(CachedError::as_str).to_vec());
        distinct(OriginOutcome::ALL.map(OriginOutcome::as_str).to_vec());
        distinct(PurgeLabel::ALL.map(PurgeLabel::as_str).to_vec());
    }
}

label_values! {
    /// The labels of `bloomgate_slices_total{event}`.
    pub enum SliceEvent {
        Stored = "stored",
        Hit = "hit",
        /// Refused by admission: the slice's first request.
        FirstHit = "first_hit",
        /// The origin answered a slice's range with the whole object.
        NotRanged = "not_ranged",
        /// The origin's `Content-Range` was not the slice's.
        WrongRange = "wrong_range",
        /// The slice was of another version of the object.
        Changed = "changed",
        /// A stale slice refreshed by the origin's 304 to a conditional request for the object
        /// (its own, or one made for another of its slices).
        Revalidated = "revalidated",
    }
}
