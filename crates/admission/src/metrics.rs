//! Prometheus names and help texts of the doorkeeper's metrics, with no exporter behind them.
//!
//! bloomgate's `/metrics` and the Pingora plugin's collector export the doorkeeper under these
//! names, so one dashboard reads either. Labels: `generation` is `current` or `previous`, `reason`
//! is a [`RotationReason::as_str`](doorkeeper::RotationReason::as_str), `decision` is the embedding
//! cache's own (bloomgate: `admitted`, `first_hit`, `probation`, `promoted`, ...).

/// Counter: the embedding cache's admission decisions, by `decision`.
pub const ADMISSION_TOTAL: &str = "bloomgate_admission_total";
/// Gauge: share of a filter's bits that are set, by `generation`.
pub const FILTER_FILL_RATIO: &str = "bloomgate_filter_fill_ratio";
/// Gauge: estimated distinct keys in a filter, by `generation`.
pub const FILTER_ESTIMATED_ITEMS: &str = "bloomgate_filter_estimated_items";
/// Gauge: estimated false-positive rate of both generations combined.
pub const FILTER_ESTIMATED_FPR: &str = "bloomgate_filter_estimated_fpr";
/// Gauge: the configured `rotate_at_fpr`.
pub const FILTER_ROTATE_AT_FPR: &str = "bloomgate_filter_rotate_at_fpr";
/// Gauge: the configured `capacity`.
pub const FILTER_CAPACITY: &str = "bloomgate_filter_capacity";
/// Gauge: bytes held by the filters.
pub const FILTER_BYTES: &str = "bloomgate_filter_bytes";
/// Gauge: the current generation's number.
pub const FILTER_GENERATION: &str = "bloomgate_filter_generation";
/// Counter: rotations, by `reason`.
pub const FILTER_ROTATIONS_TOTAL: &str = "bloomgate_filter_rotations_total";

/// Help texts of the filter metrics, so that every exporter describes them alike.
pub mod help {
    /// Help of [`FILTER_FILL_RATIO`](super::FILTER_FILL_RATIO).
    pub const FILTER_FILL_RATIO: &str =
        "Share of the doorkeeper filter's bits that are set, by generation.";
    /// Help of [`FILTER_ESTIMATED_ITEMS`](super::FILTER_ESTIMATED_ITEMS).
    pub const FILTER_ESTIMATED_ITEMS: &str =
        "Distinct keys in the doorkeeper filter (Swamidass-Baldi estimate), by generation.";
    /// Help of [`FILTER_ESTIMATED_FPR`](super::FILTER_ESTIMATED_FPR).
    pub const FILTER_ESTIMATED_FPR: &str =
        "Estimated false-positive rate of the doorkeeper (both generations combined).";
    /// Help of [`FILTER_ROTATE_AT_FPR`](super::FILTER_ROTATE_AT_FPR).
    pub const FILTER_ROTATE_AT_FPR: &str =
        "Combined false-positive rate at which the filters rotate.";
    /// Help of [`FILTER_CAPACITY`](super::FILTER_CAPACITY).
    pub const FILTER_CAPACITY: &str = "Keys one doorkeeper generation is sized for.";
    /// Help of [`FILTER_BYTES`](super::FILTER_BYTES).
    pub const FILTER_BYTES: &str = "Memory held by the doorkeeper filters.";
    /// Help of [`FILTER_GENERATION`](super::FILTER_GENERATION).
    pub const FILTER_GENERATION: &str = "Number of the doorkeeper's current generation.";
    /// Help of [`FILTER_ROTATIONS_TOTAL`](super::FILTER_ROTATIONS_TOTAL).
    pub const FILTER_ROTATIONS_TOTAL: &str = "Doorkeeper rotations, by reason.";
}
