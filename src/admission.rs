//! TEMPORARY stand-in for the doorkeeper until branch `core` lands (replaced on merge).
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct DoorkeeperConfig {
    pub capacity: u64,
    pub target_fpr: f64,
    pub rotate_at_fpr: f64,
    pub max_age: Duration,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    FirstSeen,
    SeenBefore,
}
#[derive(Clone, Debug, Default)]
pub struct GenerationStats {
    pub fill_ratio: f64,
    pub estimated_items: f64,
    pub estimated_fpr: f64,
    pub num_bits: u64,
    pub memory_bytes: usize,
}
#[derive(Clone, Debug, Default)]
pub struct RotationCounts {
    pub fpr_threshold: u64,
    pub capacity: u64,
    pub max_age: u64,
}
#[derive(Clone, Debug, Default)]
pub struct DoorkeeperStats {
    pub generation: u64,
    pub current: GenerationStats,
    pub previous: Option<GenerationStats>,
    pub combined_fpr: f64,
    pub rotations: RotationCounts,
    pub memory_bytes: usize,
}
pub struct Doorkeeper {
    seen: Mutex<HashSet<Vec<u8>>>,
}
impl Doorkeeper {
    pub fn new(_config: DoorkeeperConfig) -> Self {
        Doorkeeper {
            seen: Mutex::new(HashSet::new()),
        }
    }
    pub fn observe(&self, key: &[u8]) -> Admission {
        if self
            .seen
            .lock()
            .map(|mut s| s.insert(key.to_vec()))
            .unwrap_or(false)
        {
            Admission::FirstSeen
        } else {
            Admission::SeenBefore
        }
    }
    pub fn stats(&self) -> DoorkeeperStats {
        DoorkeeperStats::default()
    }
}
