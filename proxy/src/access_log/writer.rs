//! Buffered log writing, off the workers. Each thread (a worker, or the main
//! thread for admin) renders lines into its own buffer per sink, so logging a
//! line is a `Vec` append; a timer task on the thread's runtime (or a full
//! buffer) hands the buffers to the process's one writer thread, which owns the
//! files and does the blocking writes. A worker never waits on a disk or a pipe.
//!
//! The hand-off is a bounded channel: when the writer thread falls behind (a
//! stalled disk, a pipe nobody reads), a worker keeps its lines and offers them
//! again at the next flush instead of blocking or dropping them, as Envoy's
//! access log buffers grow until its flush thread catches up.

use courier_config::listener::access_log::Sink;
use std::cell::RefCell;
use std::io::Write;
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

/// How often buffered lines are handed to the writer thread.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// A buffer this full is handed over at once.
const FLUSH_BYTES: usize = 64 * 1024;
/// Chunks (of about [`FLUSH_BYTES`] at most) waiting for the writer thread.
const QUEUE_CHUNKS: usize = 1024;
/// How long the server's last flush waits for the writer thread at exit.
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// What the writer thread is sent.
enum Msg {
    /// Whole lines for a sink.
    Lines(Sink, Vec<u8>),
    /// Answered once everything sent before it is written.
    Sync(std::sync::mpsc::Sender<()>),
}

/// A sink's output, owned by the writer thread.
enum Out {
    File(std::fs::File),
    Stdout,
    Stderr,
    /// The file could not be opened (warned once); lines are dropped.
    Broken,
}

impl Out {
    fn open(sink: &Sink) -> Out {
        match sink {
            Sink::Stdout => Out::Stdout,
            Sink::Stderr => Out::Stderr,
            // Records go to their collector (`otel`), never here.
            Sink::OpenTelemetry(_) | Sink::HttpGrpc(_) => Out::Broken,
            Sink::File(path) => match open(path) {
                Ok(f) => Out::File(f),
                Err(e) => {
                    tracing::warn!(%path, error = %e, "cannot open access log");
                    Out::Broken
                }
            },
        }
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Out::File(f) => f.write_all(data),
            Out::Stdout => std::io::stdout().lock().write_all(data),
            Out::Stderr => std::io::stderr().lock().write_all(data),
            Out::Broken => Ok(()),
        }
    }
}

/// The writer thread's loop: writes each chunk to its sink, in the order
/// received (so one thread's lines for a sink stay in order).
fn write_all(rx: Receiver<Msg>) {
    let mut outs: Vec<(Sink, Out)> = Vec::new();
    for msg in rx {
        match msg {
            Msg::Lines(sink, data) => {
                let i = match outs.iter().position(|(s, _)| *s == sink) {
                    Some(i) => i,
                    None => {
                        let out = Out::open(&sink);
                        outs.push((sink, out));
                        outs.len() - 1
                    }
                };
                if let Some((sink, out)) = outs.get_mut(i)
                    && let Err(e) = out.write(&data)
                {
                    tracing::warn!(?sink, error = %e, "access log write failed");
                }
            }
            Msg::Sync(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// The writer thread's queue, the thread started on first use.
fn queue() -> Option<&'static SyncSender<Msg>> {
    static QUEUE: OnceLock<Option<SyncSender<Msg>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE_CHUNKS);
            match std::thread::Builder::new()
                .name("access-log".into())
                .spawn(move || write_all(rx))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the access log writer thread");
                    None
                }
            }
        })
        .as_ref()
}

struct Buffer {
    sink: Sink,
    data: Vec<u8>,
}

impl Buffer {
    /// Hands the buffered lines to the writer thread; keeps them if its
    /// queue is full (offered again at the next flush).
    fn hand_off(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let Some(tx) = queue() else {
            self.data.clear();
            return;
        };
        let data = std::mem::replace(&mut self.data, Vec::with_capacity(FLUSH_BYTES));
        match tx.try_send(Msg::Lines(self.sink.clone(), data)) {
            Ok(()) => {}
            Err(
                TrySendError::Full(Msg::Lines(_, data))
                | TrySendError::Disconnected(Msg::Lines(_, data)),
            ) => {
                self.data = data;
            }
            Err(_) => {}
        }
    }
}

#[derive(Default)]
struct Buffers {
    list: Vec<Buffer>,
    flusher: bool,
}

thread_local! {
    static BUFFERS: RefCell<Buffers> = RefCell::new(Buffers::default());
}

/// Opens `path` for appending (creating it), as the server checks at start.
pub fn open(path: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// Appends a line, rendered by `render` straight into this thread's buffer
/// for `sink`.
pub fn append(sink: &Sink, render: impl FnOnce(&mut Vec<u8>)) {
    let start_flusher = BUFFERS.with_borrow_mut(|b| {
        let i = match b.list.iter().position(|buf| &buf.sink == sink) {
            Some(i) => i,
            None => {
                b.list.push(Buffer {
                    sink: sink.clone(),
                    data: Vec::with_capacity(FLUSH_BYTES),
                });
                b.list.len() - 1
            }
        };
        if let Some(buf) = b.list.get_mut(i) {
            render(&mut buf.data);
            if buf.data.len() >= FLUSH_BYTES {
                buf.hand_off();
            }
        }
        !std::mem::replace(&mut b.flusher, true)
    });
    if start_flusher {
        // Current-thread runtimes: the task runs on this thread, with its buffers.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async {
                let mut tick = tokio::time::interval(FLUSH_INTERVAL);
                loop {
                    tick.tick().await;
                    flush();
                }
            });
        }
    }
}

/// Hands this thread's buffered lines to the writer thread (what its queue
/// takes now; the rest at the next flush).
pub fn flush() {
    BUFFERS.with_borrow_mut(|b| b.list.iter_mut().for_each(Buffer::hand_off));
}

/// Hands all of this thread's buffered lines to the writer thread, waiting
/// for room in its queue: a worker's last step once its connections are done.
pub fn flush_at_exit() {
    let Some(tx) = queue() else {
        return;
    };
    BUFFERS.with_borrow_mut(|b| {
        for buf in &mut b.list {
            if !buf.data.is_empty() {
                let data = std::mem::take(&mut buf.data);
                let _ = tx.send(Msg::Lines(buf.sink.clone(), data));
            }
        }
    });
}

/// [`flush_at_exit`], then waits (up to a bound) until the writer thread has
/// written everything handed to it so far: the server's last step.
pub fn flush_and_wait() {
    flush_at_exit();
    let Some(tx) = queue() else {
        return;
    };
    let (done, wait) = std::sync::mpsc::channel();
    if tx.send(Msg::Sync(done)).is_ok() {
        let _ = wait.recv_timeout(EXIT_WAIT);
    }
}

#[cfg(test)]
mod tests;
