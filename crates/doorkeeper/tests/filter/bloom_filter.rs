//! The filter's contract: no false negatives (also across threads), snapshots, set operations.

use std::sync::Arc;

use doorkeeper::bloom::{BloomFilter, IncompatibleFilters, SnapshotError};
use proptest::prelude::*;

fn keys(prefix: &str, n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("https://example.com/{prefix}/{i}.jpg").into_bytes())
        .collect()
}

proptest! {
    #[test]
    fn every_inserted_key_is_found(
        keys in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 1..300),
        capacity in 1u64..500,
        p in 0.0001f64..0.5,
        seed in any::<u128>(),
    ) {
        let filter = BloomFilter::builder(capacity, p).seed(seed).build();
        for key in &keys {
            filter.insert(key);
            prop_assert!(filter.contains(key));
        }
        for key in &keys {
            prop_assert!(filter.contains(key));
            prop_assert!(filter.insert(key), "a second insert must report the key present");
        }
    }
}

#[test]
fn first_insert_reports_absent_and_second_present() {
    let filter = BloomFilter::with_capacity(1000, 0.01);
    assert!(!filter.contains(b"https://example.com/a.jpg"));
    assert!(!filter.insert(b"https://example.com/a.jpg"));
    assert!(filter.insert(b"https://example.com/a.jpg"));
}

#[test]
fn keys_inserted_from_several_threads_are_all_found_and_counted_exactly() {
    let filter = Arc::new(BloomFilter::builder(200_000, 0.01).seed(9).build());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let filter = Arc::clone(&filter);
            // Overlapping key ranges, so threads race on the same keys and words.
            std::thread::spawn(move || {
                for key in keys("shared", 20_000 + t * 5_000) {
                    filter.insert(&key);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    for key in keys("shared", 35_000) {
        assert!(filter.contains(&key));
    }
    // A snapshot recounts the bits from scratch; the sharded counter must agree exactly.
    let recounted = BloomFilter::from_bytes(&filter.to_bytes()).unwrap();
    assert_eq!(filter.set_bits(), recounted.set_bits());
}

#[test]
fn one_key_sets_bits_in_one_cache_line() {
    let filter = BloomFilter::builder(10_000, 0.001).seed(5).build();
    filter.insert(b"https://example.com/a.jpg");
    let bytes = filter.to_bytes();
    let body = &bytes[64..bytes.len() - 8];
    let touched: Vec<usize> = body
        .chunks(64)
        .enumerate()
        .filter(|(_, line)| line.iter().any(|b| *b != 0))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(touched.len(), 1);
    assert!(filter.set_bits() <= u64::from(filter.num_hashes()));
}

#[test]
fn snapshot_round_trips() {
    let filter = BloomFilter::builder(5_000, 0.01).seed(11).build();
    for key in keys("a", 3_000) {
        filter.insert(&key);
    }
    let copy = BloomFilter::from_bytes(&filter.to_bytes()).unwrap();
    assert_eq!(copy, filter);
    assert_eq!(copy.capacity(), 5_000);
    assert_eq!(copy.target_fpr(), 0.01);
    assert_eq!(copy.set_bits(), filter.set_bits());
    assert_eq!(copy.estimated_len(), filter.estimated_len());
    for key in keys("a", 3_000) {
        assert!(copy.contains(&key));
    }
    assert!(!copy.insert(b"new"));
    assert!(!filter.contains(b"new"));
}

#[test]
fn every_single_byte_corruption_of_a_snapshot_is_rejected() {
    let filter = BloomFilter::builder(50, 0.01).seed(12).build();
    for key in keys("a", 40) {
        filter.insert(&key);
    }
    let bytes = filter.to_bytes();
    for at in 0..bytes.len() {
        for flip in 1..=255u8 {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= flip;
            assert!(
                BloomFilter::from_bytes(&corrupt).is_err(),
                "byte {at} ^ {flip:#04x} accepted"
            );
        }
    }
}

#[test]
fn corruption_is_reported_as_corruption_and_truncation_as_truncation() {
    let filter = BloomFilter::builder(1000, 0.01).seed(13).build();
    filter.insert(b"k");
    let bytes = filter.to_bytes();

    let mut body = bytes.clone();
    body[100] ^= 1;
    assert!(matches!(
        BloomFilter::from_bytes(&body),
        Err(SnapshotError::CorruptBits { .. })
    ));
    let mut header = bytes.clone();
    header[20] ^= 1;
    assert!(matches!(
        BloomFilter::from_bytes(&header),
        Err(SnapshotError::CorruptHeader { .. })
    ));
    let mut magic = bytes.clone();
    magic[0] = b'X';
    assert!(matches!(
        BloomFilter::from_bytes(&magic),
        Err(SnapshotError::BadMagic { .. })
    ));

    for len in 0..bytes.len() {
        let err = BloomFilter::from_bytes(&bytes[..len]).unwrap_err();
        assert!(
            matches!(
                err,
                SnapshotError::TooShort { .. } | SnapshotError::Truncated { .. }
            ),
            "{len} bytes: {err}"
        );
        assert!(err.to_string().contains("truncated"), "{err}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        BloomFilter::from_bytes(&longer),
        Err(SnapshotError::TrailingBytes { .. })
    ));
}

#[test]
fn union_equals_the_filter_of_all_keys_bit_for_bit() {
    let build = || BloomFilter::builder(10_000, 0.01).seed(21).build();
    let (left, right, all) = (build(), build(), build());
    for key in keys("left", 3_000) {
        left.insert(&key);
        all.insert(&key);
    }
    for key in keys("right", 4_000) {
        right.insert(&key);
        all.insert(&key);
    }
    let union = left.union(&right).unwrap();
    assert_eq!(union, all);
    assert_eq!(union.set_bits(), all.set_bits());
    let estimate = left.estimated_union_len(&right).unwrap();
    assert!((estimate - 7_000.0).abs() < 0.02 * 7_000.0, "{estimate}");
}

#[test]
fn intersection_holds_the_shared_keys_and_estimates_their_count() {
    let build = || BloomFilter::builder(10_000, 0.01).seed(22).build();
    let (left, right) = (build(), build());
    for key in keys("x", 6_000) {
        left.insert(&key);
    }
    for key in keys("x", 8_000).iter().skip(2_000) {
        right.insert(key);
    }
    let both = left.intersection(&right).unwrap();
    for key in keys("x", 6_000).iter().skip(2_000) {
        assert!(both.contains(key));
    }
    let estimate = left.estimated_intersection_len(&right).unwrap();
    assert!((estimate - 4_000.0).abs() < 0.05 * 4_000.0, "{estimate}");
}

#[test]
fn incompatible_filters_are_an_error_not_a_panic() {
    let a = BloomFilter::builder(1000, 0.01).seed(1).build();
    let other_seed = BloomFilter::builder(1000, 0.01).seed(2).build();
    let other_size = BloomFilter::builder(100_000, 0.01).seed(1).build();
    let other_k = BloomFilter::builder(1000, 0.01)
        .seed(1)
        .num_hashes(2)
        .build();
    assert_eq!(a.union(&other_seed).unwrap_err(), IncompatibleFilters::Seed);
    assert!(matches!(
        a.intersection(&other_size),
        Err(IncompatibleFilters::NumBits { .. })
    ));
    assert!(matches!(
        a.estimated_union_len(&other_k),
        Err(IncompatibleFilters::NumHashes { .. })
    ));
    assert!(a.estimated_intersection_len(&other_seed).is_err());
}

#[test]
fn same_seed_gives_the_same_filter_and_random_seeds_differ() {
    let a = BloomFilter::builder(1000, 0.01).seed([7; 16]).build();
    let b = BloomFilter::builder(1000, 0.01).seed([7; 16]).build();
    let c = BloomFilter::with_capacity(1000, 0.01);
    let d = BloomFilter::with_capacity(1000, 0.01);
    for f in [&a, &b, &c, &d] {
        f.insert(b"https://example.com/a.jpg");
    }
    assert_eq!(a, b);
    assert_ne!(c.seed(), d.seed());
}

#[test]
fn debug_output_does_not_reveal_the_seed() {
    let filter = BloomFilter::builder(1000, 0.01)
        .seed(0x1234_5678_9abc_def0_u128)
        .build();
    let debug = format!("{filter:?} {:?}", filter.seed());
    assert!(!debug.contains("305419896"), "{debug}");
    assert!(!debug.contains("f0"), "{debug}");
}

#[test]
#[should_panic(expected = "target_fpr")]
fn target_rate_of_one_panics() {
    BloomFilter::with_capacity(1000, 1.0);
}

#[test]
#[should_panic(expected = "capacity")]
fn zero_capacity_panics() {
    BloomFilter::with_capacity(0, 0.01);
}

#[test]
fn memory_follows_the_bits() {
    let filter = BloomFilter::with_capacity(1_000_000, 0.01);
    let bytes = filter.num_bits() as usize / 8;
    assert!(filter.memory_bytes() >= bytes && filter.memory_bytes() < bytes + 16 * 1024);
    let bits_per_key = filter.num_bits() as f64 / 1e6;
    assert!((9.6..10.5).contains(&bits_per_key), "{bits_per_key}");
}

#[test]
fn the_filter_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<BloomFilter>();
}
