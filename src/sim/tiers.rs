//! Two tiers: a RAM byte-LRU over a disk byte-LRU, and four rules for what the disk takes.
//!
//! A request hits RAM, or else the disk (and the object is copied back into RAM), or else goes to
//! the origin and the object is stored in RAM. The rules differ in what is written to disk:
//!
//! - `write-all`: every object RAM evicts (a hybrid cache's default);
//! - `every-miss`: every origin miss, at once (nginx `proxy_cache`);
//! - `gated`: an object RAM evicts, only if it was hit while in RAM or entered RAM on a request the
//!   real doorkeeper answered "seen before" (issue 11's rule: a first-and-only request never costs
//!   a disk write). An object copied back from disk is still on disk unless the disk evicted it;
//! - `second-request` (the proxy's rule for slices over a disk tier): an object's second request,
//!   a hit in RAM or a miss the doorkeeper had seen before, proves it: it stays in RAM in a
//!   write-back FIFO that is the first to give up room, and is written to disk when it does. A
//!   disk hit is served from disk, not copied back. RAM's room goes first to first copies waiting
//!   for their second request; proven objects keep only the room those do not need.
//!
//! An object already on disk is not written again. One larger than RAM but not than the disk goes
//! to disk directly where the rule would write it on eviction.

use crate::admission::{Admission, DoorkeeperConfig, RotationCounts};

use super::doorkeeper::DoorkeeperModel;
use super::lru::ByteLru;
use super::ratio::ratio;

/// What the disk takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskPolicy {
    WriteAll,
    EveryMiss,
    Gated,
    SecondRequest,
}

impl DiskPolicy {
    /// The rules `simulate` compares for whole objects.
    pub const ALL: [DiskPolicy; 3] = [
        DiskPolicy::WriteAll,
        DiskPolicy::EveryMiss,
        DiskPolicy::Gated,
    ];

    /// The rules `simulate-slices` compares: the proxy's for slices too.
    pub const FOR_SLICES: [DiskPolicy; 4] = [
        DiskPolicy::WriteAll,
        DiskPolicy::EveryMiss,
        DiskPolicy::Gated,
        DiskPolicy::SecondRequest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DiskPolicy::WriteAll => "write-all",
            DiskPolicy::EveryMiss => "every-miss",
            DiskPolicy::Gated => "gated",
            DiskPolicy::SecondRequest => "second-request",
        }
    }
}

/// The outcome of one disk rule over the whole trace.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TierReport {
    pub policy: Option<DiskPolicy>,
    pub requests: u64,
    /// Hits in either tier, and their ratio to requests.
    pub hits: u64,
    pub hit_ratio: f64,
    pub requested_bytes: u64,
    pub hit_bytes: u64,
    pub byte_hit_ratio: f64,
    pub ram_hits: u64,
    pub disk_hits: u64,
    pub disk_hit_bytes: u64,
    /// Bytes stored in RAM: origin misses and disk hits copied back.
    pub ram_written_bytes: u64,
    /// Objects written to disk, and their bytes.
    pub disk_writes: u64,
    pub disk_written_bytes: u64,
    /// `gated` and `second-request`: objects RAM evicted that were not written (neither hit in
    /// RAM nor seen before).
    pub disk_writes_refused: u64,
    pub origin_bytes: u64,
    pub rotations: RotationCounts,
}

/// The object was hit while in RAM.
const HIT_IN_RAM: u8 = 1;
/// The object entered RAM on a request the doorkeeper had seen before (or from disk).
const SEEN_BEFORE: u8 = 2;
/// `second-request`: the object is in RAM's write-back FIFO.
const WRITE_BACK: u8 = 4;

/// One disk rule over its own two tiers.
pub struct TierSim {
    ram: ByteLru,
    disk: ByteLru,
    /// Per object id: [`HIT_IN_RAM`] and [`SEEN_BEFORE`], for the RAM copy.
    flags: Vec<u8>,
    policy: DiskPolicy,
    doorkeeper: Option<DoorkeeperModel>,
    /// `second-request`: proven objects in RAM, oldest first, and their bytes (beside `ram`'s,
    /// within its capacity).
    write_back: std::collections::VecDeque<(u32, u64)>,
    write_back_bytes: u64,
    report: TierReport,
}

impl TierSim {
    /// `seed` seeds `gated`'s doorkeeper (see [`DoorkeeperModel`]).
    pub fn new(
        policy: DiskPolicy,
        ram_bytes: u64,
        disk_bytes: u64,
        doorkeeper: &DoorkeeperConfig,
        seed: u64,
    ) -> TierSim {
        let asks_doorkeeper = matches!(policy, DiskPolicy::Gated | DiskPolicy::SecondRequest);
        let doorkeeper = asks_doorkeeper.then(|| DoorkeeperModel::new(doorkeeper, seed));
        TierSim {
            ram: ByteLru::new(ram_bytes),
            disk: ByteLru::new(disk_bytes),
            flags: Vec::new(),
            policy,
            doorkeeper,
            write_back: std::collections::VecDeque::new(),
            write_back_bytes: 0,
            report: TierReport {
                policy: Some(policy),
                ..TierReport::default()
            },
        }
    }

    pub fn policy(&self) -> DiskPolicy {
        self.policy
    }

    /// One request for object `id` of `size` bytes at trace time `time`.
    pub fn request(&mut self, id: u32, fingerprint: u64, size: u64, time: f64) {
        let index = id as usize;
        if index >= self.flags.len() {
            self.flags.resize(index + 1, 0);
        }
        let report = &mut self.report;
        report.requests += 1;
        report.requested_bytes += size;
        if self.flags[index] & WRITE_BACK != 0 || self.ram.touch(id) {
            report.hits += 1;
            report.hit_bytes += size;
            report.ram_hits += 1;
            if self.policy == DiskPolicy::SecondRequest && self.flags[index] & WRITE_BACK == 0 {
                // Its room moves from the first copies' LRU to the write-back FIFO.
                self.ram.remove(id);
                self.push_write_back(id, size, 0);
            }
            self.flags[index] |= HIT_IN_RAM;
            return;
        }
        if self.disk.touch(id) {
            report.hits += 1;
            report.hit_bytes += size;
            report.disk_hits += 1;
            report.disk_hit_bytes += size;
            if self.policy != DiskPolicy::SecondRequest {
                self.store_in_ram(id, size, SEEN_BEFORE);
            }
            return;
        }
        report.origin_bytes += size;
        let flags = match &mut self.doorkeeper {
            Some(doorkeeper) => match doorkeeper.observe(fingerprint, time) {
                Admission::SeenBefore => SEEN_BEFORE,
                Admission::FirstSeen => 0,
            },
            None => 0,
        };
        match self.policy {
            DiskPolicy::EveryMiss => write(&mut self.disk, &mut self.report, id, size),
            // Proven on arrival: into the write-back FIFO, or to disk at once when the proven
            // objects before it do not make room for it.
            DiskPolicy::SecondRequest if flags == SEEN_BEFORE => {
                if self.write_back_room(size) {
                    self.report.ram_written_bytes += size;
                    self.push_write_back(id, size, SEEN_BEFORE);
                } else {
                    write(&mut self.disk, &mut self.report, id, size);
                }
                return;
            }
            _ => {}
        }
        self.store_in_ram(id, size, flags);
    }

    /// `second-request`: places object `id` of `size` bytes, with `flags`, at the back of RAM's
    /// write-back FIFO (its room already made).
    fn push_write_back(&mut self, id: u32, size: u64, flags: u8) {
        self.write_back.push_back((id, size));
        self.write_back_bytes += size;
        self.flags[id as usize] = WRITE_BACK | flags;
    }

    /// `second-request`: makes room for `size` more bytes in RAM by writing the oldest proven
    /// objects to disk; whether RAM then has it (a first copy's LRU gives up its own oldest).
    fn write_back_room(&mut self, size: u64) -> bool {
        let capacity = self.ram.capacity_bytes();
        while self.ram.used_bytes() + self.write_back_bytes + size > capacity {
            let Some((victim, victim_size)) = self.write_back.pop_front() else {
                return false;
            };
            self.write_back_bytes -= victim_size;
            self.flags[victim as usize] = 0;
            if !self.disk.contains(victim) {
                write(&mut self.disk, &mut self.report, victim, victim_size);
            }
        }
        true
    }

    /// Stores an object in RAM with `flags`; what RAM evicts goes to disk as the rule says.
    fn store_in_ram(&mut self, id: u32, size: u64, flags: u8) {
        if self.policy == DiskPolicy::SecondRequest {
            self.write_back_room(size);
        }
        self.flags[id as usize] = flags;
        self.report.ram_written_bytes += size;
        let TierSim {
            ram,
            disk,
            flags: all_flags,
            policy,
            report,
            ..
        } = self;
        let policy = *policy;
        let mut leaving = |victim: u32, victim_size: u64| {
            let victim_flags = all_flags[victim as usize];
            all_flags[victim as usize] = 0;
            evicted_from_ram(disk, report, policy, victim, victim_size, victim_flags);
        };
        if ram.insert_evicting(id, size, &mut leaving).is_none() {
            // Larger than RAM: it goes to disk directly where the rule would write it on eviction.
            leaving(id, size);
        }
    }

    /// The report, with ratios and the doorkeeper's rotations filled in.
    pub fn finish(mut self) -> TierReport {
        let report = &mut self.report;
        report.hit_ratio = ratio(report.hits, report.requests);
        report.byte_hit_ratio = ratio(report.hit_bytes, report.requested_bytes);
        if let Some(doorkeeper) = &self.doorkeeper {
            report.rotations = doorkeeper.rotations();
        }
        self.report
    }
}

/// What the rule does with an object RAM gives up.
fn evicted_from_ram(
    disk: &mut ByteLru,
    report: &mut TierReport,
    policy: DiskPolicy,
    id: u32,
    size: u64,
    flags: u8,
) {
    if disk.contains(id) {
        return;
    }
    match policy {
        DiskPolicy::WriteAll => write(disk, report, id, size),
        DiskPolicy::EveryMiss => {}
        DiskPolicy::Gated if flags & (HIT_IN_RAM | SEEN_BEFORE) != 0 => {
            write(disk, report, id, size)
        }
        DiskPolicy::Gated | DiskPolicy::SecondRequest => report.disk_writes_refused += 1,
    }
}

/// Writes an object that is not on disk (a disk miss, or checked by [`evicted_from_ram`]).
fn write(disk: &mut ByteLru, report: &mut TierReport, id: u32, size: u64) {
    if disk.insert(id, size).is_some() {
        report.disk_writes += 1;
        report.disk_written_bytes += size;
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn run(policy: DiskPolicy, keys: &str, ram: u64, disk: u64) -> TierReport {
        let config = DoorkeeperConfig::with_capacity(1000);
        let mut sim = TierSim::new(policy, ram, disk, &config, 1);
        for (time, key) in keys.split_whitespace().enumerate() {
            let id = u32::from(key.as_bytes()[0] - b'A');
            sim.request(
                id,
                u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                10,
                time as f64,
            );
        }
        sim.finish()
    }

    #[test]
    fn a_one_hit_object_never_costs_a_gated_disk_write() {
        // RAM holds one 10-byte object: A, B, C, D each pass through it once.
        let gated = run(DiskPolicy::Gated, "A B C D", 10, 100);
        assert_eq!((gated.disk_writes, gated.disk_writes_refused), (0, 3));
        let all = run(DiskPolicy::WriteAll, "A B C D", 10, 100);
        assert_eq!(all.disk_writes, 3);
        let every = run(DiskPolicy::EveryMiss, "A B C D", 10, 100);
        assert_eq!(every.disk_writes, 4);
    }

    #[test]
    fn gated_writes_what_was_hit_in_ram_or_seen_before_and_serves_it_from_disk() {
        // A is hit in RAM, then evicted by B: written. A comes back from disk (a disk hit) into
        // RAM and evicts B, first seen and never hit: not written.
        let gated = run(DiskPolicy::Gated, "A A B A", 10, 100);
        assert_eq!(gated.disk_writes, 1, "{gated:?}");
        assert_eq!((gated.ram_hits, gated.disk_hits), (1, 1));
        assert_eq!(gated.disk_writes_refused, 1);
        // B and C leave RAM unwritten after their first requests; their second requests are seen
        // before, so each is written when RAM gives it up, and B's third is a disk hit.
        let gated = run(DiskPolicy::Gated, "B C B C B", 10, 100);
        assert_eq!((gated.disk_hits, gated.disk_writes), (1, 2), "{gated:?}");
        assert_eq!(gated.disk_writes_refused, 2);
    }

    #[test]
    fn second_request_keeps_proven_objects_in_ram_until_first_copies_need_the_room() {
        // RAM holds three: A and B are proven by their second requests and stay, and A's third
        // and B's last requests are RAM hits; C fits beside them; D needs room, and A, the oldest
        // proven, leaves for the disk: the one write.
        let rule = run(DiskPolicy::SecondRequest, "A B A B A C D B", 30, 100);
        assert_eq!(
            (rule.ram_hits, rule.disk_hits, rule.disk_writes),
            (4, 0, 1),
            "{rule:?}"
        );
        assert_eq!(rule.disk_writes_refused, 0);
    }

    #[test]
    fn second_request_writes_a_proven_object_when_a_first_copy_needs_its_room() {
        // RAM holds two: A and B wait there; A's second request proves it, and C's first copy
        // pushes it to disk, so B survives C and is hit; D is asked once and never written.
        let rule = run(DiskPolicy::SecondRequest, "A B A C B D A", 20, 100);
        assert_eq!(
            (rule.ram_hits, rule.disk_hits, rule.disk_writes),
            (2, 1, 2),
            "{rule:?}"
        );
        assert_eq!(rule.origin_bytes, 40, "A, B, C and D once each");
        // A first copy RAM gave up is fetched again, seen before, and written at once.
        let rule = run(DiskPolicy::SecondRequest, "A B C A A", 20, 100);
        assert_eq!((rule.disk_writes, rule.disk_hits), (1, 1), "{rule:?}");
        assert_eq!(rule.disk_writes_refused, 1, "A's first copy");
    }

    #[test]
    fn an_object_on_disk_is_not_written_again() {
        let all = run(DiskPolicy::WriteAll, "A B A B A B", 10, 100);
        // A and B are each written once, then go back and forth between the tiers.
        assert_eq!(all.disk_writes, 2, "{all:?}");
        assert_eq!(all.disk_hits, 4);
    }
}
