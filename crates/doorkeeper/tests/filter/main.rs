//! The admission filter, with no HTTP in it: the Bloom filter's contract and measured rates, and
//! the doorkeeper built on two of them. One test crate per subject, so that it is linked once.
//!
//! proptest keeps the regressions of `admission_doorkeeper.rs` in
//! `tests/proptest-regressions/admission_doorkeeper.txt` (its rule for a source file beside a
//! `main.rs`).

mod admission_doorkeeper;
mod admission_snapshot;
mod admission_stress;
mod bloom_filter;
mod bloom_fpr;
