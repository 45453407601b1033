//! A raw HTTP/1.1 upstream for tests: answers every request (headers read,
//! bounded) with one fixed status and an empty body, on keep-alive
//! connections, counting the requests it saw; status 0 never answers (the
//! proxy's timeout ends the request).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Starts the upstream: its address and its count of requests.
pub fn start(status: u16) -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address");
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || serve(s, status, &seen));
        }
    });
    (addr, count)
}

fn serve(s: std::net::TcpStream, status: u16, seen: &AtomicUsize) {
    let Ok(read) = s.try_clone() else { return };
    let mut r = BufReader::new(read);
    let mut s = s;
    loop {
        let mut ended = false;
        for _ in 0..200 {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                ended = true;
                break;
            }
        }
        seen.fetch_add(1, Ordering::SeqCst);
        if status == 0 {
            // Hold the request unanswered until the proxy gives up.
            continue;
        }
        if !ended || write!(s, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}
