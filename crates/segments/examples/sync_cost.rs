//! What `Options::sync_on_seal` costs the writer: the same records written with and without it.
//!
//! Usage: `cargo run --release -p bloomgate-segments --example sync_cost [DIR] [MIB] [RECORD_KIB]`
//! (defaults `/var/tmp`, 256, 64). Each round writes MIB MiB of RECORD_KIB KiB records into a
//! fresh engine of 16 MiB segments (bloomgate's default `disk.block_bytes`) capped at half that,
//! so segments are sealed and reclaimed throughout, then closes it (which seals the last); the
//! time runs from the first put to the end of `close`. Rounds alternate between the two settings.
//! A file system on a device, not tmpfs: a tmpfs sync costs nothing.
//!
//! 2026-11-26, a 2-vCPU VM (ext4 on virtio `/dev/vda`, load average 2.8 from other builds):
//!
//! ```text
//! $ sync_cost /var/tmp 256 64
//! 4096 records of 64 KiB (256 MiB) in /var/tmp
//! round 0 sync_on_seal=false   0.11 s  2350.9 MiB/s  syncs   0 (0.00 s in sync)  waits 0
//! round 0 sync_on_seal=true    0.49 s   518.5 MiB/s  syncs  34 (0.39 s in sync)  waits 6
//! round 1 sync_on_seal=false   0.09 s  2766.3 MiB/s  syncs   0 (0.00 s in sync)  waits 0
//! round 1 sync_on_seal=true    0.46 s   552.0 MiB/s  syncs  34 (0.37 s in sync)  waits 6
//! round 2 sync_on_seal=false   0.10 s  2471.9 MiB/s  syncs   0 (0.00 s in sync)  waits 0
//! round 2 sync_on_seal=true    0.48 s   529.2 MiB/s  syncs  34 (0.36 s in sync)  waits 5
//! $ sync_cost /var/tmp 1024 16
//! 65536 records of 16 KiB (1024 MiB) in /var/tmp
//! round 0 sync_on_seal=false   0.59 s  1745.2 MiB/s  syncs   0 (0.00 s in sync)  waits 21
//! round 0 sync_on_seal=true    1.46 s   699.0 MiB/s  syncs 130 (1.11 s in sync)  waits 40
//! round 1 sync_on_seal=false   0.40 s  2580.1 MiB/s  syncs   0 (0.00 s in sync)  waits 25
//! round 1 sync_on_seal=true    1.65 s   621.7 MiB/s  syncs 130 (1.30 s in sync)  waits 30
//! round 2 sync_on_seal=false   0.42 s  2464.1 MiB/s  syncs   0 (0.00 s in sync)  waits 6
//! round 2 sync_on_seal=true    1.93 s   530.4 MiB/s  syncs 130 (1.58 s in sync)  waits 30
//! ```
//!
//! Without syncs the writer copies into the page cache (the device gets the bytes later); with
//! them it waits for the device: 3.5-5x less writer throughput, about 20 ms of sync per sealed
//! 16 MiB segment (two syncs of 8-12 ms). At 100 MB/s of disk-tier writes that is about an eighth
//! of the writer thread's time; requests never wait for it.

use std::path::PathBuf;
use std::time::Instant;

use segments::{Engine, Options, Stored};

const SEGMENT_BYTES: u64 = 16 << 20;
const ROUNDS: usize = 3;

fn main() {
    let mut args = std::env::args().skip(1);
    let base = PathBuf::from(args.next().unwrap_or_else(|| "/var/tmp".into()));
    let mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let record_kib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let value = vec![0x5a; record_kib << 10];
    let records = (mib << 20) / value.len() as u64;
    println!(
        "{records} records of {record_kib} KiB ({mib} MiB) in {}",
        base.display()
    );
    for round in 0..ROUNDS {
        for sync_on_seal in [false, true] {
            let dir = base.join(format!("segments-sync-cost-{}", std::process::id()));
            let options = Options::new(&dir, mib.max(64) << 19)
                .segment_bytes(SEGMENT_BYTES)
                .sync_on_seal(sync_on_seal);
            let (engine, _) = Engine::open(options).expect("open the engine");
            let started = Instant::now();
            let mut waits = 0;
            for n in 0..records {
                // The buffer is full when the writer is behind: wait for it, as the tier's
                // writer does, and put the record again.
                while engine.put(&n.to_le_bytes(), &value) == Stored::BufferFull {
                    waits += 1;
                    engine.wait();
                }
            }
            engine.close();
            let elapsed = started.elapsed();
            let stats = engine.stats();
            drop(engine);
            let _ = std::fs::remove_dir_all(&dir);
            println!(
                "round {round} sync_on_seal={sync_on_seal:<5} {:6.2} s {:7.1} MiB/s  syncs {:3} ({:.2} s in sync)  waits {waits}",
                elapsed.as_secs_f64(),
                mib as f64 / elapsed.as_secs_f64(),
                stats.syncs,
                stats.sync_time.as_secs_f64(),
            );
        }
    }
}
