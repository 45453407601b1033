use super::{Sink, append, flush, flush_and_wait};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// A sink nobody reads (a pipe whose 64 KiB fill up) stalls the writer thread,
/// not the thread logging: every line is appended and handed over while the
/// pipe is full, and all of them arrive, in order, once it is read.
#[test]
fn a_stalled_sink_does_not_block_the_logging_thread() {
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    let sink = Sink::File(format!("/proc/self/fd/{}", writer.as_raw_fd()));
    const LINES: usize = 20_000; // ~1 MiB: far past the pipe's buffer
    let (done, finished) = std::sync::mpsc::channel();
    let logging = {
        let sink = sink.clone();
        std::thread::spawn(move || {
            for i in 0..LINES {
                append(&sink, |buf| {
                    buf.extend_from_slice(format!("line {i:06} {}\n", "x".repeat(40)).as_bytes())
                });
                if i % 1000 == 0 {
                    flush();
                }
            }
            flush();
            done.send(()).expect("send");
            // What the queue did not take yet, then wait for the writes.
            flush_and_wait();
        })
    };
    // Nothing has read the pipe: a thread writing to it itself would be stuck.
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("the logging thread finished while its sink was stalled");
    let mut text = String::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while text.lines().count() < LINES {
        let n = reader.read(&mut chunk).expect("read");
        assert!(n > 0, "pipe closed after {} lines", text.lines().count());
        text.push_str(std::str::from_utf8(&chunk[..n]).expect("utf-8"));
    }
    logging.join().expect("logging thread");
    drop(writer);
    for (i, line) in text.lines().enumerate() {
        assert!(line.starts_with(&format!("line {i:06} ")), "{line}");
    }
    assert_eq!(text.lines().count(), LINES);
}
