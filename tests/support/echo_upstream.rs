//! A raw HTTP/1.1 upstream for tests that answers `200` with what it received of
//! each request: the request target and then, for each header name it was asked
//! to report, every value of that header (`name: value` lines, in the order of
//! the names asked for, each name's values in arrival order: the order of
//! different headers is each proxy's own).
//! Differential tests compare these bodies to see what each proxy forwarded.
//! Requests are expected without bodies.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};

/// Starts the upstream reporting headers `names` (lower-case); its address.
pub fn start(names: &'static [&'static str]) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address");
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || serve(s, names));
        }
    });
    addr
}

fn serve(s: std::net::TcpStream, names: &[&str]) {
    let Ok(read) = s.try_clone() else { return };
    let mut r = BufReader::new(read);
    let mut s = s;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let target = line.split(' ').nth(1).unwrap_or("").to_string();
        let mut seen: Vec<(usize, String)> = Vec::new();
        let mut ended = false;
        // Bounded: at most 200 header lines.
        for _ in 0..200 {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                ended = true;
                break;
            }
            if let Some((k, v)) = h.trim_end().split_once(':') {
                let k = k.to_ascii_lowercase();
                if let Some(i) = names.iter().position(|n| *n == k) {
                    seen.push((i, format!("{k}: {}\n", v.trim())));
                }
            }
        }
        // Stable: a name's values keep their order.
        seen.sort_by_key(|(i, _)| *i);
        let report: String = std::iter::once(format!("{target}\n"))
            .chain(seen.into_iter().map(|(_, line)| line))
            .collect();
        if !ended
            || write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{report}",
                report.len()
            )
            .is_err()
        {
            return;
        }
    }
}
