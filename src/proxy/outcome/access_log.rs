//! The access log's writer: requests append their formatted lines to a buffer bounded in bytes,
//! and one thread of its own takes the whole buffer every 100 ms and writes it to the file, so a
//! slow disk never slows a request; a line that does not fit is dropped and counted. The file is
//! reopened on request (SIGUSR1, SIGHUP) for logrotate.
//!
//! Requests never wake the writer line by line (a wake-up per line costs the serving threads more
//! than the line itself): it wakes on its clock, when the buffer is half full, or when asked to
//! reopen or flush.

use std::cell::RefCell;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use metrics::{Counter, counter};

use crate::config::{AccessLogConfig, AccessLogFormat, AccessLogPath};
use crate::telemetry::{ACCESS_LOG_DROPPED_TOTAL, ACCESS_LOG_LINES_TOTAL};
use crate::trace::AccessLine;

/// The writer takes what is queued this often (sooner when the queue is half full), so lines
/// reach the file within this.
const WRITE_EVERY: Duration = Duration::from_millis(100);
/// Room for a typical line, so formatting one seldom grows its string.
const LINE_CAPACITY: usize = 512;

thread_local! {
    /// Each serving thread formats its lines here, so a line costs no allocation.
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(LINE_CAPACITY));
}

/// Why the access log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AccessLogError {
    #[error("cannot open the access log {path}: {source}")]
    Open {
        path: AccessLogPath,
        source: std::io::Error,
    },
    #[error("cannot start the access log's writer thread: {0}")]
    Thread(std::io::Error),
}

/// An open access log in one format. Requests of a configuration share one; a reload that keeps
/// the path keeps its file and writer.
pub struct AccessLog {
    format: AccessLogFormat,
    sink: Arc<Sink>,
}

impl AccessLog {
    /// Opens the log `config` names (appending to the file, created if missing), or `None` when
    /// it names none.
    pub fn open(config: &AccessLogConfig) -> Result<Option<Arc<AccessLog>>, AccessLogError> {
        AccessLog::reconfigure(None, config)
    }

    /// The log for a new configuration: `old` itself when nothing changed; `old`'s file and writer
    /// in the new format or buffer size when the path is the same; a newly opened file otherwise.
    /// On an error `old` is unchanged and the caller keeps it.
    pub fn reconfigure(
        old: Option<&Arc<AccessLog>>,
        config: &AccessLogConfig,
    ) -> Result<Option<Arc<AccessLog>>, AccessLogError> {
        let Some(path) = &config.path else {
            return Ok(None);
        };
        let sink = match old {
            Some(old) if &old.sink.path == path => {
                let limit = old.sink.shared.limit.swap(config.buffer, Ordering::Relaxed);
                if old.format == config.format && limit == config.buffer {
                    return Ok(Some(Arc::clone(old)));
                }
                Arc::clone(&old.sink)
            }
            _ => Arc::new(Sink::open(path, config.buffer)?),
        };
        Ok(Some(Arc::new(AccessLog {
            format: config.format,
            sink,
        })))
    }

    /// Formats a line and queues it for the writer; drops and counts it when the queue is full.
    pub fn write(&self, line: &AccessLine<'_>) {
        let write = |text: &mut Vec<u8>| {
            text.clear();
            match self.format {
                AccessLogFormat::Combined => line.write_combined(text),
                AccessLogFormat::Json => line.write_json(text),
            }
            self.sink.queue(text);
        };
        // A thread that is ending may have dropped its string already: a new one then.
        let written = LINE
            .try_with(|text| text.try_borrow_mut().map(|mut text| write(&mut text)))
            .is_ok_and(|written| written.is_ok());
        if !written {
            write(&mut Vec::with_capacity(LINE_CAPACITY));
        }
    }

    /// Asks the writer to reopen the file by its path (after logrotate renamed it). Lines already
    /// queued may still go to the old file.
    pub fn reopen(&self) {
        self.sink.shared.ask(|queue| queue.reopen = true);
    }

    /// Waits, at most `within`, until every line queued so far is written to the file; returns
    /// whether they were. Blocks the calling thread.
    pub fn flush(&self, within: Duration) -> bool {
        let shared = &self.sink.shared;
        let mut asked = 0;
        shared.ask(|queue| {
            queue.flush_asked += 1;
            asked = queue.flush_asked;
        });
        let (queue, _) = shared
            .flushed
            .wait_timeout_while(shared.lock(), within, |queue| queue.flush_done < asked)
            .unwrap_or_else(PoisonError::into_inner);
        queue.flush_done >= asked
    }
}

/// One file (or standard output) and the thread that writes it. Dropped when no configuration
/// uses it any more: the thread then writes what is queued and ends.
struct Sink {
    path: AccessLogPath,
    shared: Arc<Shared>,
    dropped: Counter,
}

/// What the serving threads and the writer share.
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer before its time: the queue is half full, or it is asked something.
    wake: Condvar,
    /// Tells flushes waiting that the writer has written what they waited for.
    flushed: Condvar,
    /// `log.access.buffer`: the most bytes the queue may hold.
    limit: AtomicU64,
}

/// Lines waiting for the writer, and what it is asked to do besides.
#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    lines: u64,
    /// The writer was woken for a half-full queue and has not taken it yet.
    woken: bool,
    reopen: bool,
    flush_asked: u64,
    flush_done: u64,
    /// No one writes lines any more: write what is left and end.
    closed: bool,
}

impl Queue {
    fn has_work(&self) -> bool {
        self.woken || self.reopen || self.closed || self.flush_asked > self.flush_done
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ask(&self, request: impl FnOnce(&mut Queue)) {
        request(&mut self.lock());
        self.wake.notify_one();
    }
}

impl Sink {
    fn open(path: &AccessLogPath, limit: u64) -> Result<Sink, AccessLogError> {
        let output = open_output(path).map_err(|source| AccessLogError::Open {
            path: path.clone(),
            source,
        })?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            limit: AtomicU64::new(limit),
        });
        let writer = Writer {
            path: path.clone(),
            shared: Arc::clone(&shared),
            output,
            written: counter!(ACCESS_LOG_LINES_TOTAL),
            dropped: counter!(ACCESS_LOG_DROPPED_TOTAL),
            failing: false,
        };
        std::thread::Builder::new()
            .name("bloomgate-access-log".to_owned())
            .spawn(move || writer.run())
            .map_err(AccessLogError::Thread)?;
        Ok(Sink {
            path: path.clone(),
            shared,
            dropped: counter!(ACCESS_LOG_DROPPED_TOTAL),
        })
    }

    /// Appends a line if it fits under the limit, else drops and counts it.
    fn queue(&self, line: &[u8]) {
        let limit = self.shared.limit.load(Ordering::Relaxed);
        let mut queue = self.shared.lock();
        let after = (queue.bytes.len() + line.len()) as u64;
        if after > limit {
            drop(queue);
            self.dropped.increment(1);
            return;
        }
        queue.bytes.extend_from_slice(line);
        queue.lines += 1;
        let wake = !queue.woken && after >= limit / 2;
        queue.woken |= wake;
        drop(queue);
        if wake {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shared.ask(|queue| queue.closed = true);
    }
}

/// The writer thread's state: it alone touches the file.
struct Writer {
    path: AccessLogPath,
    shared: Arc<Shared>,
    output: Box<dyn Write + Send>,
    written: Counter,
    dropped: Counter,
    /// Writing failed last time: logged once, until a write succeeds again.
    failing: bool,
}

impl Writer {
    fn run(mut self) {
        // The queue's buffer and this one trade places, so neither is allocated again.
        let mut batch = Vec::new();
        let mut next = Instant::now() + WRITE_EVERY;
        loop {
            let (lines, reopen, flush_asked, closed) = {
                let mut queue = self.shared.lock();
                while !queue.has_work() {
                    let Some(left) = next.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    queue = self
                        .shared
                        .wake
                        .wait_timeout(queue, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                std::mem::swap(&mut queue.bytes, &mut batch);
                queue.woken = false;
                (
                    std::mem::take(&mut queue.lines),
                    std::mem::take(&mut queue.reopen),
                    queue.flush_asked,
                    queue.closed,
                )
            };
            next = Instant::now() + WRITE_EVERY;
            if !batch.is_empty() {
                let result = self
                    .output
                    .write_all(&batch)
                    .and_then(|()| self.output.flush());
                self.note(result, lines);
                batch.clear();
            }
            if reopen {
                self.reopen();
            }
            let mut queue = self.shared.lock();
            if queue.flush_done < flush_asked {
                queue.flush_done = flush_asked;
                self.shared.flushed.notify_all();
            }
            if closed {
                return;
            }
        }
    }

    /// Counts lines written or dropped, and logs a failure once, until writing works again.
    fn note(&mut self, result: std::io::Result<()>, lines: u64) {
        match result {
            Ok(()) => {
                self.written.increment(lines);
                if self.failing {
                    self.failing = false;
                    tracing::info!(path = %self.path, "access log: writing again");
                }
            }
            Err(error) => {
                self.dropped.increment(lines);
                if !self.failing {
                    self.failing = true;
                    tracing::error!(path = %self.path, %error, "access log: cannot write; lines are dropped until it can");
                }
            }
        }
    }

    /// Opens the path again; on failure keeps writing to the file already open.
    fn reopen(&mut self) {
        if self.path == AccessLogPath::Stdout {
            return;
        }
        match open_output(&self.path) {
            Ok(output) => {
                self.output = output;
                tracing::info!(path = %self.path, "access log reopened");
            }
            Err(error) => tracing::error!(
                path = %self.path,
                %error,
                "access log: cannot reopen; still writing to the file open before"
            ),
        }
    }
}

/// Standard output, or the file appended to (created if missing).
fn open_output(path: &AccessLogPath) -> std::io::Result<Box<dyn Write + Send>> {
    Ok(match path {
        AccessLogPath::Stdout => Box::new(std::io::stdout()),
        AccessLogPath::File(path) => {
            Box::new(OpenOptions::new().append(true).create(true).open(path)?)
        }
    })
}
