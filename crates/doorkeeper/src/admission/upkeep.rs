//! The doorkeeper's upkeep thread: zeroes the next generation's filter before a rotation needs
//! it and frees retired filters, so that neither job (about a millisecond each at 10^7 keys) runs
//! on a request.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use crate::bloom::{BloomFilter, Sizing};

use super::{DoorkeeperConfig, Generation};

/// How often the thread looks again at retired filters that a reader still holds. Readers hold a
/// generation for the length of one observe, so one look later nearly always frees them.
const RETRY_RETIRED: Duration = Duration::from_millis(1);

enum Chore {
    /// A generation was installed: prepare its successor's filter and its rotation threshold.
    Prepare(Arc<Generation>),
    /// A filter left `previous`: free it once no reader holds it.
    Retire(Arc<BloomFilter>),
}

/// The sending end of the upkeep thread's queue; the thread ends when this is dropped.
pub(super) struct Upkeep {
    /// `None` if the thread could not be started: rotations then prepare and free inline.
    chores: Option<Sender<Chore>>,
}

impl Upkeep {
    pub(super) fn start(config: DoorkeeperConfig, sizing: Sizing) -> Self {
        let (chores, queue) = mpsc::channel();
        let started = std::thread::Builder::new()
            .name("doorkeeper".into())
            .spawn(move || run(&config, sizing, &queue));
        Self {
            chores: started.ok().map(|_| chores),
        }
    }

    /// Queues the preparation of `generation`'s successor.
    pub(super) fn prepare(&self, generation: Arc<Generation>) {
        self.send(Chore::Prepare(generation));
    }

    /// Queues a retired filter to be freed off the request path.
    pub(super) fn retire(&self, filter: Arc<BloomFilter>) {
        self.send(Chore::Retire(filter));
    }

    fn send(&self, chore: Chore) {
        if let Some(chores) = &self.chores {
            // The thread only stops when this sender is dropped, so a failed send means it
            // panicked: the chore is then dropped here and rotations prepare their own successor.
            let _ = chores.send(chore);
        }
    }
}

fn run(config: &DoorkeeperConfig, sizing: Sizing, queue: &Receiver<Chore>) {
    // The lowest priority, so that waking this thread at a rotation does not preempt a request
    // thread on a busy machine: its jobs can wait (a rotation that finds no successor makes its
    // own). Linux keeps the nice value per thread; elsewhere it would lower the whole process.
    #[cfg(target_os = "linux")]
    let _ = rustix::process::setpriority_process(None, 19);
    let mut retired: Vec<Arc<BloomFilter>> = Vec::new();
    loop {
        let chore = if retired.is_empty() {
            queue.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            queue.recv_timeout(RETRY_RETIRED)
        };
        match chore {
            // Nobody else holds the generation: the doorkeeper is gone, nothing to prepare.
            Ok(Chore::Prepare(generation)) if Arc::strong_count(&generation) > 1 => {
                generation.prepare(config, sizing);
            }
            Ok(Chore::Prepare(_)) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Chore::Retire(filter)) => retired.push(filter),
            Err(RecvTimeoutError::Disconnected) => return,
        }
        // Dropping the last reference frees the filter here rather than in a reader.
        retired.retain(|filter| Arc::strong_count(filter) > 1);
    }
}
