//! How an entry proved itself in RAM: what a tier below may take when it leaves.

use crate::admission::probation::Segment;

use super::Write;

pub(super) const PROOF_NONE: u8 = 0;
pub(super) const PROOF_SEEN_BEFORE: u8 = 1;
pub(super) const PROOF_RAM_HIT: u8 = 2;
/// Kept by the tier below too (read back from it into idle RAM): a hit there, for what a tier
/// below may take, and never promoted within RAM.
pub(super) const PROOF_BELOW: u8 = 3;

/// How an entry earned a place in a tier below RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// Written into main on a request the doorkeeper had seen before (its second within the
    /// window), or with admission off.
    SeenBefore,
    /// Hit while in RAM (an entry read back from disk counts: it was hit there).
    RamHit,
}

impl Proof {
    pub(super) fn from_u8(proof: u8) -> Option<Proof> {
        match proof {
            PROOF_SEEN_BEFORE => Some(Proof::SeenBefore),
            PROOF_RAM_HIT | PROOF_BELOW => Some(Proof::RamHit),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Proof::SeenBefore => "seen_before",
            Proof::RamHit => "ram_hit",
        }
    }
}

/// The proof (`PROOF_*`) a write leaves its slot with: what the slot it replaces had proved while
/// live, else what the write itself proves, `how` it came about and into which `segment`.
pub(super) fn of_write(kept: u8, how: Write, segment: Segment) -> u8 {
    match how {
        _ if kept != PROOF_NONE => kept,
        // A fetched write into main is a second request (seen before), or admission is off.
        Write::Fetched if segment == Segment::Main => PROOF_SEEN_BEFORE,
        Write::Restored => PROOF_RAM_HIT,
        Write::Idle => PROOF_BELOW,
        _ => PROOF_NONE,
    }
}
