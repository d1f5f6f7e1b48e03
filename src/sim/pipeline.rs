//! Reading a trace file in one thread while simulators consume its requests in others.

use std::path::Path;
use std::sync::{Arc, mpsc};

use crate::trace::{ReadOptions, TraceError, TraceInfo, TraceReader};

use super::interner::Interner;
use super::request::{SimRequest, TraceStats, key_fingerprint};

/// Requests per batch handed from the reading thread to the consuming threads.
const BATCH: usize = 16 * 1024;
/// Batches in flight per consumer: enough to smooth out decompression bursts.
const BATCHES_IN_FLIGHT: usize = 8;

/// Something that takes every request of the trace, in order, a batch at a time.
pub type Consumer<'a> = &'a mut (dyn FnMut(&[SimRequest]) + Send);

/// Reads, decompresses, parses, fingerprints and interns `path` in this thread and hands every
/// batch of requests to each of `consumers`, each running in a thread of its own. Returns what the
/// reader and the interner found out about the trace.
pub fn scan(
    path: &Path,
    options: ReadOptions,
    consumers: &mut [Consumer<'_>],
) -> Result<(TraceInfo, TraceStats), TraceError> {
    let mut reader = TraceReader::open(path, options)?;
    std::thread::scope(|scope| {
        let senders: Vec<_> = consumers
            .iter_mut()
            .map(|consume| {
                let (sender, batches) =
                    mpsc::sync_channel::<Arc<Vec<SimRequest>>>(BATCHES_IN_FLIGHT);
                scope.spawn(move || batches.iter().for_each(|batch| consume(&batch)));
                sender
            })
            .collect();
        read(&mut reader, &senders)
    })
}

/// Reads the whole trace in batches and sends each to every sender, recycling a batch once every
/// consumer is done with it.
fn read(
    reader: &mut TraceReader,
    senders: &[mpsc::SyncSender<Arc<Vec<SimRequest>>>],
) -> Result<(TraceInfo, TraceStats), TraceError> {
    let mut interner = Interner::default();
    let mut in_flight: Vec<Arc<Vec<SimRequest>>> = Vec::new();
    let mut batch = Vec::with_capacity(BATCH);
    let send = |batch: Vec<SimRequest>, in_flight: &mut Vec<_>| -> Option<Vec<SimRequest>> {
        let shared = Arc::new(batch);
        for sender in senders {
            // A consumer only hangs up by panicking, which the scope then reports.
            sender.send(Arc::clone(&shared)).ok()?;
        }
        in_flight.push(shared);
        let done = in_flight.iter().position(|b| Arc::strong_count(b) == 1);
        let mut next = done
            .and_then(|index| Arc::try_unwrap(in_flight.swap_remove(index)).ok())
            .unwrap_or_else(|| Vec::with_capacity(BATCH));
        next.clear();
        Some(next)
    };
    while let Some(request) = reader.next_ref() {
        let request = request?;
        batch.push(SimRequest {
            id: 0,
            key_bytes: u32::try_from(request.key.len()).unwrap_or(u32::MAX),
            fingerprint: key_fingerprint(request.key),
            size: request.size,
            time: request.time,
        });
        if batch.len() == BATCH {
            interner.intern_all(&mut batch);
            match send(std::mem::take(&mut batch), &mut in_flight) {
                Some(next) => batch = next,
                None => break,
            }
        }
    }
    if !batch.is_empty() {
        interner.intern_all(&mut batch);
        send(batch, &mut in_flight);
    }
    Ok((reader.info().clone(), interner.stats()))
}
