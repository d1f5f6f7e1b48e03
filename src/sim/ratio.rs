//! Ratios and shares, as the simulator's and the demo's reports give them.

/// `part / whole`, or 0 when there is no whole: every ratio and share the simulator and the demo
/// report.
pub(crate) fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}
