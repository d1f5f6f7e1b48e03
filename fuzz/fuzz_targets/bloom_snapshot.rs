//! Fuzz target: the filter and doorkeeper snapshot decoders on arbitrary bytes.
//!
//! Never panics; whatever decodes encodes back to the same bytes, and a restored doorkeeper keeps
//! working: it observes keys and rotates.

#![no_main]

use std::sync::Arc;
use std::time::Duration;

use bloomgate::admission::{Admission, Doorkeeper, DoorkeeperConfig, ManualClock};
use bloomgate::bloom::BloomFilter;
use libfuzzer_sys::fuzz_target;

/// Small filters (1000 keys at 1%: 2 KiB), so that the fuzzer can reach valid snapshots.
fn config() -> DoorkeeperConfig {
    DoorkeeperConfig {
        capacity: 1000,
        target_fpr: 0.01,
        rotate_at_fpr: 0.02,
        max_age: Duration::from_secs(60),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(filter) = BloomFilter::from_bytes(data) {
        assert!(
            filter.to_bytes() == data,
            "filter snapshot does not round-trip"
        );
        filter.insert(b"/fuzz");
        assert!(filter.contains(b"/fuzz"));
    }

    let clock = Arc::new(ManualClock::new());
    if let Ok(door) = Doorkeeper::builder(config()).clock(clock.clone()).restore(data) {
        assert!(
            door.snapshot() == data,
            "doorkeeper snapshot does not round-trip"
        );
        door.observe(b"/fuzz");
        assert_eq!(door.observe(b"/fuzz"), Admission::SeenBefore);
        clock.advance(config().max_age);
        assert!(
            door.rotate_if_due().is_some(),
            "an old generation did not rotate"
        );
        assert_eq!(door.observe(b"/fuzz"), Admission::SeenBefore);
    }
});
