//! A doorkeeper restored from its snapshot remembers what it had seen.

use std::sync::Arc;
use std::time::Duration;

use doorkeeper::{Admission, Doorkeeper, DoorkeeperConfig, DoorkeeperSnapshotError, ManualClock};

fn config() -> DoorkeeperConfig {
    DoorkeeperConfig {
        capacity: 1_000,
        target_fpr: 0.01,
        rotate_at_fpr: 0.02,
        max_age: Duration::from_secs(60),
    }
}

fn url(i: u64) -> Vec<u8> {
    format!("https://example.com/{i}.jpg").into_bytes()
}

fn two_generations() -> Doorkeeper {
    let clock = Arc::new(ManualClock::new());
    let door = Doorkeeper::builder(config())
        .clock(clock.clone())
        .build()
        .unwrap();
    for i in 0..300 {
        door.observe(&url(i));
    }
    clock.advance(Duration::from_secs(60));
    door.rotate_if_due();
    for i in 300..500 {
        door.observe(&url(i));
    }
    door
}

#[test]
fn restored_doorkeeper_remembers_both_generations() {
    let door = two_generations();
    let restored = Doorkeeper::builder(config())
        .restore(&door.snapshot())
        .unwrap();
    assert_eq!(restored.generation(), 1);
    assert_eq!(restored.stats().rotations, door.stats().rotations);
    for i in 0..500 {
        assert_eq!(restored.observe(&url(i)), Admission::SeenBefore, "key {i}");
    }
    assert_eq!(restored.snapshot().len(), door.snapshot().len());
}

#[test]
fn a_fresh_doorkeeper_round_trips() {
    let door = Doorkeeper::builder(config()).build().unwrap();
    door.observe(b"a");
    let restored = Doorkeeper::builder(config())
        .restore(&door.snapshot())
        .unwrap();
    assert!(restored.stats().previous.is_none());
    assert!(restored.contains(b"a"));
}

#[test]
fn corrupt_or_truncated_snapshots_are_rejected() {
    let bytes = two_generations().snapshot();
    for at in (0..bytes.len()).step_by(7) {
        let mut corrupt = bytes.clone();
        corrupt[at] ^= 0x5a;
        assert!(
            Doorkeeper::builder(config()).restore(&corrupt).is_err(),
            "byte {at}"
        );
    }
    for len in (0..bytes.len()).step_by(13) {
        let err = Doorkeeper::builder(config())
            .restore(&bytes[..len])
            .unwrap_err();
        assert!(err.to_string().contains("truncated"), "{len}: {err}");
    }
}

#[test]
fn a_snapshot_sized_for_another_capacity_is_rejected() {
    let bytes = two_generations().snapshot();
    let bigger = DoorkeeperConfig {
        capacity: 2_000,
        ..config()
    };
    let err = Doorkeeper::builder(bigger).restore(&bytes).unwrap_err();
    assert!(
        matches!(err, DoorkeeperSnapshotError::ConfigMismatch { .. }),
        "{err}"
    );
}
