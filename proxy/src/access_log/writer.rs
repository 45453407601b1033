//! Per-thread buffered log writers. Each thread (a worker, or the main thread for
//! admin) keeps its own buffer per sink and its own append-mode file handle, so
//! writing a line is a `Vec` append; a timer task on the thread's runtime flushes
//! the buffers, as does the thread when it drains.

use courier_config::listener::access_log::Sink;
use std::cell::RefCell;
use std::io::Write;
use std::time::Duration;

/// How often buffered lines are written out.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// A buffer this full is written out at once.
const FLUSH_BYTES: usize = 64 * 1024;

enum Out {
    File(std::fs::File),
    Stdout,
    Stderr,
    /// The file could not be opened (warned once); lines are dropped.
    Broken,
}

struct Buffer {
    sink: Sink,
    out: Out,
    data: Vec<u8>,
}

impl Buffer {
    fn flush(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let result = match &mut self.out {
            Out::File(f) => f.write_all(&self.data),
            Out::Stdout => std::io::stdout().lock().write_all(&self.data),
            Out::Stderr => std::io::stderr().lock().write_all(&self.data),
            Out::Broken => Ok(()),
        };
        if let Err(e) = result {
            tracing::warn!(sink = ?self.sink, error = %e, "access log write failed");
        }
        self.data.clear();
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
                let out = match sink {
                    Sink::Stdout => Out::Stdout,
                    Sink::Stderr => Out::Stderr,
                    Sink::File(path) => match open(path) {
                        Ok(f) => Out::File(f),
                        Err(e) => {
                            tracing::warn!(%path, error = %e, "cannot open access log");
                            Out::Broken
                        }
                    },
                };
                b.list.push(Buffer {
                    sink: sink.clone(),
                    out,
                    data: Vec::with_capacity(FLUSH_BYTES),
                });
                b.list.len() - 1
            }
        };
        if let Some(buf) = b.list.get_mut(i) {
            render(&mut buf.data);
            if buf.data.len() >= FLUSH_BYTES {
                buf.flush();
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

/// Writes out this thread's buffered lines.
pub fn flush() {
    BUFFERS.with_borrow_mut(|b| b.list.iter_mut().for_each(Buffer::flush));
}
