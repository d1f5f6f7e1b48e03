//! Reading a trace file in one thread while the simulator runs in another.

use std::path::Path;
use std::sync::mpsc;

use crate::trace::{ReadOptions, TraceError, TraceInfo, TraceReader};

use super::engine::{SimRequest, key_fingerprint};

/// Requests per batch handed from the reading thread to the simulating thread.
const BATCH: usize = 16 * 1024;
/// Batches in flight: enough to smooth out decompression bursts.
const BATCHES_IN_FLIGHT: usize = 8;

/// Reads, decompresses, parses and fingerprints `path` in a second thread and calls `consume` on
/// batches of requests in this one. Returns what the reader found out about the trace.
pub fn scan(
    path: &Path,
    options: ReadOptions,
    mut consume: impl FnMut(&[SimRequest]),
) -> Result<TraceInfo, TraceError> {
    let mut reader = TraceReader::open(path, options)?;
    let (full_sender, full) = mpsc::sync_channel::<Vec<SimRequest>>(BATCHES_IN_FLIGHT);
    let (empty_sender, empty) = mpsc::channel::<Vec<SimRequest>>();
    std::thread::scope(|scope| {
        let reading = scope.spawn(move || -> Result<TraceInfo, TraceError> {
            let mut batch = Vec::with_capacity(BATCH);
            while let Some(request) = reader.next_ref() {
                let request = request?;
                batch.push(SimRequest {
                    fingerprint: key_fingerprint(request.key),
                    size: request.size,
                    time: request.time,
                });
                if batch.len() == BATCH {
                    let next = empty
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(BATCH));
                    if full_sender
                        .send(std::mem::replace(&mut batch, next))
                        .is_err()
                    {
                        break;
                    }
                }
            }
            if !batch.is_empty() {
                // The receiver only goes away once this thread is done.
                let _ = full_sender.send(batch);
            }
            Ok(reader.info().clone())
        });
        for mut batch in full {
            consume(&batch);
            batch.clear();
            // The reader may have finished; a lost buffer is only a lost allocation.
            let _ = empty_sender.send(batch);
        }
        match reading.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
