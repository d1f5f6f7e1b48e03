//! Writes the snapshot seeds of the `bloom_snapshot` target: `cargo run --example make_seeds`.
//!
//! The plain filters have fixed seeds; the doorkeeper draws random ones, so its files change per run.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bloomgate::admission::{Doorkeeper, DoorkeeperConfig, ManualClock};
use bloomgate::bloom::BloomFilter;

fn main() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/bloom_snapshot");
    std::fs::create_dir_all(&dir)?;

    let filter = BloomFilter::builder(100, 0.01).seed(7).build();
    std::fs::write(dir.join("filter-empty"), filter.to_bytes())?;
    for key in ["/a.jpg", "/b.css", "/c"] {
        filter.insert(key.as_bytes());
    }
    std::fs::write(dir.join("filter-3-keys"), filter.to_bytes())?;

    // The target restores with this config (1000 keys at 1%), so these snapshots are accepted.
    let config = DoorkeeperConfig {
        capacity: 1000,
        target_fpr: 0.01,
        rotate_at_fpr: 0.02,
        max_age: Duration::from_secs(60),
    };
    let clock = Arc::new(ManualClock::new());
    let door = Doorkeeper::builder(config.clone()).clock(clock.clone()).build().unwrap();
    door.observe(b"/a.jpg");
    std::fs::write(dir.join("doorkeeper-one-generation"), door.snapshot())?;
    clock.advance(config.max_age);
    door.rotate_if_due();
    door.observe(b"/b.css");
    std::fs::write(dir.join("doorkeeper-two-generations"), door.snapshot())?;
    Ok(())
}
