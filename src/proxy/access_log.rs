//! The access log's writer: requests hand their formatted lines to a queue bounded in bytes, and one
//! thread of its own owns the file, so a slow disk never slows a request; a line that does not fit
//! is dropped and counted. The file is reopened on request (SIGUSR1, SIGHUP) for logrotate.

use std::fs::OpenOptions;
use std::io::{BufWriter, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use metrics::{Counter, counter};

use crate::config::{AccessLogConfig, AccessLogFormat, AccessLogPath};
use crate::telemetry::{ACCESS_LOG_DROPPED_TOTAL, ACCESS_LOG_LINES_TOTAL};
use crate::trace::AccessLine;

/// Lines are written out at least this often, even while more keep coming.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// And as soon as no line has come for this long, so a quiet log is never behind by much.
const FLUSH_WHEN_IDLE: Duration = Duration::from_millis(100);
/// The writer's own buffer: one write call per this many bytes under load.
const WRITE_BUFFER: usize = 64 << 10;
/// Room for a typical line, so formatting one seldom grows its string.
const LINE_CAPACITY: usize = 384;

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
                let limit = old.sink.limit.swap(config.buffer, Ordering::Relaxed);
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
        let mut text = String::with_capacity(LINE_CAPACITY);
        match self.format {
            AccessLogFormat::Combined => line.write_combined(&mut text),
            AccessLogFormat::Json => line.write_json(&mut text),
        }
        self.sink.send(text);
    }

    /// Asks the writer to reopen the file by its path (after logrotate renamed it). Lines already
    /// queued may still go to the old file.
    pub fn reopen(&self) {
        self.sink.control.ask(|requests| requests.reopen = true);
        self.sink.wake();
    }

    /// Waits, at most `within`, until every line queued so far is written to the file; returns
    /// whether they were. Blocks the calling thread.
    pub fn flush(&self, within: Duration) -> bool {
        let mut asked = 0;
        self.sink.control.ask(|requests| {
            requests.flush_asked += 1;
            asked = requests.flush_asked;
        });
        self.sink.wake();
        self.sink.control.wait_flushed(asked, within)
    }
}

/// One file (or standard output) and the thread that writes it. Dropped when no configuration
/// uses it any more: the thread then writes what is queued and ends.
struct Sink {
    path: AccessLogPath,
    queue: Sender<String>,
    /// Bytes of lines queued and not yet taken by the writer.
    queued: Arc<AtomicU64>,
    /// `log.access.buffer`: the most bytes `queued` may reach.
    limit: AtomicU64,
    control: Arc<Control>,
    dropped: Counter,
}

impl Sink {
    fn open(path: &AccessLogPath, limit: u64) -> Result<Sink, AccessLogError> {
        let output = open_output(path).map_err(|source| AccessLogError::Open {
            path: path.clone(),
            source,
        })?;
        let (queue, lines) = mpsc::channel();
        let queued = Arc::new(AtomicU64::new(0));
        let control = Arc::new(Control::default());
        let writer = Writer {
            path: path.clone(),
            lines,
            queued: Arc::clone(&queued),
            control: Arc::clone(&control),
            output: BufWriter::with_capacity(WRITE_BUFFER, output),
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
            queue,
            queued,
            limit: AtomicU64::new(limit),
            control,
            dropped: counter!(ACCESS_LOG_DROPPED_TOTAL),
        })
    }

    /// Queues a line if it fits under the limit, else drops and counts it.
    fn send(&self, line: String) {
        let bytes = line.len() as u64;
        let before = self.queued.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes > self.limit.load(Ordering::Relaxed) || self.queue.send(line).is_err() {
            self.queued.fetch_sub(bytes, Ordering::Relaxed);
            self.dropped.increment(1);
        }
    }

    /// Wakes the writer to look at its requests (an empty line is no line).
    fn wake(&self) {
        let _ = self.queue.send(String::new());
    }
}

/// What the writer is asked to do besides writing lines.
#[derive(Default)]
struct Control {
    requests: Mutex<Requests>,
    /// Set with every request, so the writer looks at `requests` only when there is one.
    pending: AtomicBool,
    flushed: Condvar,
}

#[derive(Default)]
struct Requests {
    reopen: bool,
    flush_asked: u64,
    flush_done: u64,
}

impl Control {
    fn ask(&self, request: impl FnOnce(&mut Requests)) {
        request(&mut self.requests.lock().unwrap_or_else(PoisonError::into_inner));
        self.pending.store(true, Ordering::Release);
    }

    fn wait_flushed(&self, asked: u64, within: Duration) -> bool {
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        let (requests, _) = self
            .flushed
            .wait_timeout_while(requests, within, |requests| requests.flush_done < asked)
            .unwrap_or_else(PoisonError::into_inner);
        requests.flush_done >= asked
    }
}

/// The writer thread's state: it alone touches the file.
struct Writer {
    path: AccessLogPath,
    lines: Receiver<String>,
    queued: Arc<AtomicU64>,
    control: Arc<Control>,
    output: BufWriter<Box<dyn Write + Send>>,
    written: Counter,
    dropped: Counter,
    /// Writing failed last time: logged once, until a write succeeds again.
    failing: bool,
}

impl Writer {
    fn run(mut self) {
        let mut last_flush = Instant::now();
        let mut unflushed = false;
        loop {
            let next = if unflushed {
                let due = FLUSH_EVERY.saturating_sub(last_flush.elapsed());
                self.lines.recv_timeout(due.min(FLUSH_WHEN_IDLE))
            } else {
                self.lines
                    .recv()
                    .map_err(|_| RecvTimeoutError::Disconnected)
            };
            let quiet = match next {
                Ok(line) => {
                    unflushed |= self.take(&line);
                    false
                }
                Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => {
                    self.flush();
                    return;
                }
            };
            if unflushed && (quiet || last_flush.elapsed() >= FLUSH_EVERY) {
                self.flush();
                unflushed = false;
                last_flush = Instant::now();
            }
            if self.control.pending.swap(false, Ordering::Acquire) {
                self.answer_requests();
                unflushed = false;
                last_flush = Instant::now();
            }
        }
    }

    /// Writes one queued line into the buffer; returns whether there was one.
    fn take(&mut self, line: &str) -> bool {
        if line.is_empty() {
            return false;
        }
        self.queued.fetch_sub(line.len() as u64, Ordering::Relaxed);
        let result = self.output.write_all(line.as_bytes());
        self.note(result, 1);
        true
    }

    fn flush(&mut self) {
        let result = self.output.flush();
        self.note(result, 0);
    }

    /// Counts a line written or dropped, and logs a failure once, until writing works again.
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

    /// Reopens the file if asked, and writes out every line queued so far if a flush is awaited.
    fn answer_requests(&mut self) {
        let (reopen, flush_asked) = {
            let mut requests = self
                .control
                .requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (std::mem::take(&mut requests.reopen), requests.flush_asked)
        };
        while let Ok(line) = self.lines.try_recv() {
            self.take(&line);
        }
        self.flush();
        if reopen {
            self.reopen();
        }
        let mut requests = self
            .control
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        requests.flush_done = flush_asked;
        self.control.flushed.notify_all();
    }

    /// Opens the path again; on failure keeps writing to the file already open.
    fn reopen(&mut self) {
        if self.path == AccessLogPath::Stdout {
            return;
        }
        match open_output(&self.path) {
            Ok(output) => {
                self.output = BufWriter::with_capacity(WRITE_BUFFER, output);
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
