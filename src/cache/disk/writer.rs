//! The writer thread: queued entries encoded and handed to the engine, within the budgets.

use std::os::unix::fs::MetadataExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{DiskEngine, Rejection, Shared, WriteReason, engine_files, record};
use crate::cache::{CacheKey, Variants};

/// A write handed to the writer thread.
pub(super) enum Job {
    Write {
        /// Its ticket in [`Pending`](super::pending::Pending).
        ticket: u64,
        key: CacheKey,
        variants: Variants,
        reason: WriteReason,
        /// The purge sequence when the write was queued (see [`Purges`](super::purges::Purges)).
        sequence: u64,
        /// Wait for room instead of refusing (the flush at shutdown).
        patient: bool,
        weight: u64,
    },
    /// Answers once every job before it is done and the engine has written it.
    Barrier(mpsc::Sender<()>),
}

/// The writer thread: encodes queued entries and hands them to the engine, within the budgets.
pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    pub(super) runtime: Option<tokio::runtime::Handle>,
    pub(super) rate: Rate,
    /// When the tier's files were last measured, and the bytes they took.
    pub(super) space_checked: Option<(Instant, u64)>,
    /// Bytes handed to the engine since the writer last waited for it.
    pub(super) since_wait: u64,
}

/// How often the writer measures the tier's files, when space is short.
const SPACE_CHECK_EVERY: Duration = Duration::from_millis(200);

impl Writer {
    pub(super) fn run(mut self, jobs: mpsc::Receiver<Job>) {
        for job in jobs {
            match job {
                Job::Barrier(done) => {
                    if let Some(runtime) = &self.runtime
                        && let Some(engine) = self.shared.engine.get()
                    {
                        let waited =
                            catch_unwind(AssertUnwindSafe(|| runtime.block_on(engine.wait())));
                        if let Err(panic) = waited {
                            self.shared.fail(&panic_text(&panic));
                        }
                    }
                    let _ = done.send(());
                }
                Job::Write {
                    ticket,
                    key,
                    variants,
                    reason,
                    sequence,
                    patient,
                    weight,
                } => {
                    if self.shared.failed.load(Ordering::Relaxed) {
                        self.shared.reject(Rejection::Failed);
                    } else {
                        let wrote = catch_unwind(AssertUnwindSafe(|| {
                            self.write(&key, &variants, reason, sequence, patient)
                        }));
                        if let Err(panic) = wrote {
                            self.shared.fail(&panic_text(&panic));
                        }
                    }
                    self.shared.pending.settled(&key, ticket);
                    self.shared.queued.fetch_sub(weight, Ordering::AcqRel);
                    self.shared.drained.notify_waiters();
                }
            }
        }
    }

    fn write(
        &mut self,
        key: &CacheKey,
        variants: &Variants,
        reason: WriteReason,
        sequence: u64,
        patient: bool,
    ) {
        if self.shared.purges.purged_since(key, sequence) {
            return;
        }
        // Writes are queued only once the engine is open.
        let Some(engine) = self.shared.engine.get().cloned() else {
            self.shared.reject(Rejection::Recovering);
            return;
        };
        if self.disk_full(&engine) {
            self.shared.reject(Rejection::Full);
            return;
        }
        let shared = Arc::clone(&self.shared);
        let responses: Vec<_> = variants.responses().cloned().collect();
        let record = record::encode(&responses);
        // What the engine stores: the key beside the record.
        let len = (key.as_bytes().len() + record.len()) as u64;
        // The engine adds its own entry header and aligns to pages.
        if len + 4096 > shared.block_bytes {
            shared.reject(Rejection::TooLarge);
            return;
        }
        if !self.rate.take(len, patient) {
            shared.reject(Rejection::Budget);
            return;
        }
        engine.put(key.as_str(), Bytes::from(record));
        let counters = &shared.counters;
        counters.writes[reason as usize].fetch_add(1, Ordering::Relaxed);
        counters.written_bytes[reason as usize].fetch_add(len, Ordering::Relaxed);
        // The engine drops what comes beyond its own write queue (as large as ours) without
        // saying so: after half of it, wait for the engine to catch up, so that a backlog shows
        // here as refused writes ("budget") instead.
        self.since_wait += len;
        if self.since_wait > shared.write_buffer / 2 {
            self.since_wait = 0;
            if let Some(runtime) = &self.runtime {
                runtime.block_on(engine.wait());
            }
        }
    }

    /// Whether a write could run the file system out of space. Asked before every write (one
    /// `statvfs`): the segment engine preallocates its files, so its writes need no new space,
    /// but on a file system without `fallocate` its files are sparse and a write can meet a full
    /// disk, which loses the records of that write. Writes stop while the free space is under
    /// what may still be in flight (two segments and the write buffer) and under what the
    /// engine's files may still claim. A change either way is logged.
    fn disk_full(&mut self, engine: &Arc<dyn DiskEngine>) -> bool {
        let shared = Arc::clone(&self.shared);
        let free = match rustix::fs::statvfs(&shared.dir) {
            Ok(stat) => stat.f_bavail.saturating_mul(stat.f_frsize),
            Err(error) => {
                tracing::warn!(%error, dir = %shared.dir.display(), "disk tier: cannot read free space");
                return shared.full.load(Ordering::Relaxed);
            }
        };
        let in_flight = 2 * shared.block_bytes + shared.write_buffer;
        let full = free < in_flight && free < self.unclaimed(engine);
        if full != shared.full.swap(full, Ordering::Relaxed) {
            if full {
                tracing::warn!(dir = %shared.dir.display(), free,
                    "disk tier: file system full, disk writes stop (serving from RAM and disk goes on)");
            } else {
                tracing::info!(dir = %shared.dir.display(), free, "disk tier: space again, disk writes resume");
            }
        }
        full
    }

    /// Bytes the tier's files may still take on the file system (the engine's capacity less what
    /// they take now), read at most every [`SPACE_CHECK_EVERY`].
    fn unclaimed(&mut self, engine: &Arc<dyn DiskEngine>) -> u64 {
        let fresh = self
            .space_checked
            .is_some_and(|(at, _)| at.elapsed() < SPACE_CHECK_EVERY);
        if !fresh {
            let taken = allocated(&self.shared.dir);
            self.space_checked = Some((Instant::now(), taken));
        }
        let taken = self.space_checked.map_or(0, |(_, taken)| taken);
        engine.capacity().saturating_sub(taken)
    }
}

/// Bytes the engine's files in `dir` take on the file system (allocated blocks).
pub(super) fn allocated(dir: &Path) -> u64 {
    engine_files(dir)
        .filter_map(|path| std::fs::metadata(path).ok())
        .map(|meta| meta.blocks() * 512)
        .sum()
}

/// What a caught panic said.
pub(super) fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// `disk.write_budget`: a token bucket of bytes, refilled every second's worth, holding at most
/// one second of budget.
pub(super) struct Rate {
    per_second: u64,
    tokens: f64,
    refilled: Instant,
}

impl Rate {
    pub(super) fn new(per_second: u64) -> Rate {
        Rate {
            per_second,
            tokens: per_second as f64,
            refilled: Instant::now(),
        }
    }

    /// Takes `bytes` of budget if there is that much (or no budget is set); `patient` waits for it.
    pub(super) fn take(&mut self, bytes: u64, patient: bool) -> bool {
        if self.per_second == 0 {
            return true;
        }
        loop {
            let now = Instant::now();
            let elapsed = now.duration_since(self.refilled).as_secs_f64();
            self.refilled = now;
            let cap = self.per_second.max(bytes) as f64;
            self.tokens = (self.tokens + elapsed * self.per_second as f64).min(cap);
            if self.tokens >= bytes as f64 {
                self.tokens -= bytes as f64;
                return true;
            }
            if !patient {
                return false;
            }
            let wait = (bytes as f64 - self.tokens) / self.per_second as f64;
            std::thread::sleep(Duration::from_secs_f64(wait.min(1.0)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_refuses_beyond_its_budget_and_refills() {
        let mut rate = Rate::new(1000);
        assert!(rate.take(600, false));
        assert!(!rate.take(600, false), "only 400 bytes left this second");
        rate.refilled -= Duration::from_millis(500);
        assert!(rate.take(600, false), "half a second refills 500 bytes");
        assert!(Rate::new(0).take(u64::MAX, false), "0 is no limit");
    }
}
