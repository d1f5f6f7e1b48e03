//! Crash safety: records written, the active segment damaged as a crash or a bad disk would
//! leave it, the engine reopened. No record that fails its checks is ever returned, and every
//! record wholly before the damage is still there.

use std::os::unix::fs::FileExt;

use proptest::prelude::*;
use segments::{Engine, Options};

const SEGMENT: u64 = 1 << 20;

/// What happens to the active segment's file after the last write.
#[derive(Clone, Debug)]
enum Damage {
    /// The file ends at this byte (a write torn by the stop); reopening zero-fills the rest.
    Truncate(u64),
    /// These bytes are overwritten with garbage.
    Overwrite(u64, Vec<u8>),
    /// One bit flips.
    FlipBit(u64, u8),
}

impl Damage {
    fn first_byte(&self) -> u64 {
        match self {
            Damage::Truncate(at) | Damage::Overwrite(at, _) | Damage::FlipBit(at, _) => *at,
        }
    }
}

fn value(n: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (n * 31 + i * 7) as u8).collect()
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (64..SEGMENT / 4).prop_map(Damage::Truncate),
        (64..SEGMENT / 4, prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(at, bytes)| Damage::Overwrite(at, bytes)),
        (64..SEGMENT / 4, 0..8u8).prop_map(|(at, bit)| Damage::FlipBit(at, bit)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn reopening_after_damage_returns_only_whole_records(
        sizes in prop::collection::vec(0usize..6000, 1..60),
        damage in damage(),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = Options::new(dir.path(), 4 * SEGMENT).segment_bytes(SEGMENT);
        let (engine, _) = Engine::open(options.clone()).expect("open");
        // All records go to segment 0, the first active one, in this order from byte 64.
        let mut ends = Vec::new();
        let mut offset = 64;
        for (n, size) in sizes.iter().enumerate() {
            let key = format!("key{n}");
            engine.put(key.as_bytes(), &value(n, *size));
            offset += segments::record_bytes(key.len() as u64, *size as u64);
            ends.push(offset);
        }
        // Stopped without sealing: the segment is left as after a kill once its writes landed.
        drop(engine);
        let path = dir.path().join("segment-00000");
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("open segment");
        match &damage {
            Damage::Truncate(at) => file.set_len(*at).expect("truncate"),
            Damage::Overwrite(at, bytes) => file.write_all_at(bytes, *at).expect("overwrite"),
            Damage::FlipBit(at, bit) => {
                let mut byte = [0];
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut byte, *at).expect("read");
                byte[0] ^= 1 << bit;
                file.write_all_at(&byte, *at).expect("flip");
            }
        }
        drop(file);
        let (engine, recovery) = Engine::open(options).expect("reopen");
        prop_assert!(recovery.entries <= sizes.len() as u64);
        for (n, size) in sizes.iter().enumerate() {
            let key = format!("key{n}");
            let found = engine.read(key.as_bytes()).expect("read");
            if let Some(found) = &found {
                prop_assert!(found[..] == value(n, *size)[..], "{} returned a wrong value", key);
            }
            if ends[n] <= damage.first_byte() {
                prop_assert!(found.is_some(), "{} lay wholly before the damage at {} and is gone", key, damage.first_byte());
            }
        }
    }
}
