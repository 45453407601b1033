//! The PROXY protocol listener filter: a connection starts with a v1 (text)
//! or v2 (binary) header naming the client's and the original destination's
//! addresses, which then stand for the socket's (as Envoy's filter restores
//! them); the header is consumed, the rest of the bytes are the connection's.
//!
//! Stats as Envoy 1.40's: `downstream_cx_proxy_proto_error` (root scope) and
//! `proxy_proto.[<stat_prefix>.]{not_found_allowed, not_found_disallowed,
//! versions.v1.{found,disallowed,error}, versions.v2.{…}}`.

use crate::stats::{Counter, Sample};
use arc_swap::ArcSwap;
use courier_config::listener::proxy_protocol::ProxyProtocol;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

const V1_SIGNATURE: &[u8] = b"PROXY ";
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
/// Envoy's longest v1 line (`\r\n` included).
const V1_MAX: usize = 108;
/// A v2 header's fixed part.
const V2_HEADER: usize = 16;
/// The longest header read: v2 with a Unix address block (Envoy's maximum).
const MAX: usize = V2_HEADER + 216;

/// One version's counters.
#[derive(Debug, Default)]
pub struct VersionStats {
    /// `found`: headers taken.
    pub found: Counter,
    /// `disallowed`: headers of a version the filter refuses.
    pub disallowed: Counter,
    /// `error`: malformed headers.
    pub error: Counter,
}

/// The filter's counters for one stat prefix.
#[derive(Debug, Default)]
pub struct Stats {
    /// `not_found_allowed`: connections without a header, let through.
    pub not_found_allowed: Counter,
    /// `not_found_disallowed`: connections without a header, closed.
    pub not_found_disallowed: Counter,
    /// `versions.v1.*`.
    pub v1: VersionStats,
    /// `versions.v2.*`.
    pub v2: VersionStats,
}

/// `downstream_cx_proxy_proto_error`, in the root scope (Envoy's legacy stat).
fn legacy_error() -> &'static Counter {
    static C: OnceLock<Counter> = OnceLock::new();
    C.get_or_init(Counter::default)
}

type Table = ArcSwap<Vec<(String, Arc<Stats>)>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Table::default)
}

/// The stats of `prefix`, made on first use by the main thread as it builds
/// listeners (the only writer).
pub fn register(prefix: &str) -> Arc<Stats> {
    let t = table();
    if let Some((_, s)) = t.load().iter().find(|(p, _)| p == prefix) {
        return Arc::clone(s);
    }
    let stats = Arc::new(Stats::default());
    let mut next = Vec::clone(&t.load());
    next.push((prefix.to_string(), Arc::clone(&stats)));
    t.store(Arc::new(next));
    stats
}

/// Every sample of the filter (once a listener has it).
pub fn samples(out: &mut Vec<Sample>) {
    let t = table().load();
    if t.is_empty() {
        return;
    }
    out.push((
        "downstream_cx_proxy_proto_error".to_string(),
        legacy_error().get(),
    ));
    for (prefix, s) in t.iter() {
        let base = if prefix.is_empty() {
            "proxy_proto".to_string()
        } else {
            format!("proxy_proto.{prefix}")
        };
        out.push((
            format!("{base}.not_found_allowed"),
            s.not_found_allowed.get(),
        ));
        out.push((
            format!("{base}.not_found_disallowed"),
            s.not_found_disallowed.get(),
        ));
        for (v, vs) in [("v1", &s.v1), ("v2", &s.v2)] {
            out.push((format!("{base}.versions.{v}.found"), vs.found.get()));
            out.push((
                format!("{base}.versions.{v}.disallowed"),
                vs.disallowed.get(),
            ));
            out.push((format!("{base}.versions.{v}.error"), vs.error.get()));
        }
    }
}

/// Zeroes the counters (`/reset_counters`).
pub fn reset_counters() {
    legacy_error().reset();
    for (_, s) in table().load().iter() {
        for c in [
            &s.not_found_allowed,
            &s.not_found_disallowed,
            &s.v1.found,
            &s.v1.disallowed,
            &s.v1.error,
            &s.v2.found,
            &s.v2.disallowed,
            &s.v2.error,
        ] {
            c.reset();
        }
    }
}

/// What a header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addresses {
    /// The client's and the original destination's addresses.
    Proxied {
        /// The client.
        source: SocketAddr,
        /// Where it connected to.
        destination: SocketAddr,
    },
    /// `UNKNOWN` (v1) or `LOCAL` (v2): the socket's own addresses stand.
    Own,
}

/// Parsing the bytes read so far.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// More bytes are needed.
    More,
    /// No header: the bytes start otherwise.
    NotFound,
    /// A header of `len` bytes.
    Header {
        /// 1 or 2.
        version: u8,
        /// Its length.
        len: usize,
        /// What it says.
        addresses: Addresses,
    },
    /// A malformed header of this version.
    Error(u8),
}

fn parse(buf: &[u8]) -> Parsed {
    let starts = |sig: &[u8]| {
        let n = buf.len().min(sig.len());
        buf[..n] == sig[..n]
    };
    if starts(V2_SIGNATURE) {
        if buf.len() < V2_HEADER {
            return Parsed::More;
        }
        return parse_v2(buf);
    }
    if starts(V1_SIGNATURE) {
        let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
            return if buf.len() >= V1_MAX {
                Parsed::Error(1)
            } else {
                Parsed::More
            };
        };
        if end + 2 > V1_MAX {
            return Parsed::Error(1);
        }
        return match parse_v1(&buf[..end]) {
            Some(addresses) => Parsed::Header {
                version: 1,
                len: end + 2,
                addresses,
            },
            None => Parsed::Error(1),
        };
    }
    Parsed::NotFound
}

fn parse_v1(line: &[u8]) -> Option<Addresses> {
    let line = std::str::from_utf8(line).ok()?;
    let parts: Vec<&str> = line.split(' ').filter(|p| !p.is_empty()).collect();
    if parts.len() < 2 || parts[0] != "PROXY" {
        return None;
    }
    if parts[1] == "UNKNOWN" {
        return Some(Addresses::Own);
    }
    if parts.len() != 6 {
        return None;
    }
    let v6 = match parts[1] {
        "TCP4" => false,
        "TCP6" => true,
        _ => return None,
    };
    let ip = |s: &str| -> Option<IpAddr> {
        let ip: IpAddr = s.parse().ok()?;
        (ip.is_ipv6() == v6).then_some(ip)
    };
    let port = |s: &str| s.parse::<u16>().ok();
    proxied(
        SocketAddr::new(ip(parts[2])?, port(parts[4])?),
        SocketAddr::new(ip(parts[3])?, port(parts[5])?),
    )
}

/// Envoy takes only unicast addresses.
fn proxied(source: SocketAddr, destination: SocketAddr) -> Option<Addresses> {
    let unicast = |ip: IpAddr| {
        !(ip.is_multicast() || ip.is_unspecified() || ip == IpAddr::V4(Ipv4Addr::BROADCAST))
    };
    (unicast(source.ip()) && unicast(destination.ip())).then_some(Addresses::Proxied {
        source,
        destination,
    })
}

fn parse_v2(buf: &[u8]) -> Parsed {
    let ver_cmd = buf[12];
    let family = buf[13];
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if ver_cmd >> 4 != 2 {
        return Parsed::Error(2);
    }
    let total = V2_HEADER + len;
    if total > MAX {
        return Parsed::Error(2);
    }
    let local = ver_cmd & 0xf == 0;
    if !local && ver_cmd & 0xf != 1 {
        return Parsed::Error(2);
    }
    if buf.len() < total {
        return Parsed::More;
    }
    if local {
        return Parsed::Header {
            version: 2,
            len: total,
            addresses: Addresses::Own,
        };
    }
    let transport = family & 0xf;
    if transport != 1 && transport != 2 {
        return Parsed::Error(2);
    }
    let a = &buf[V2_HEADER..total];
    let port = |i: usize| u16::from_be_bytes([a[i], a[i + 1]]);
    let addresses = match family >> 4 {
        1 if len >= 12 => {
            let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(a[i], a[i + 1], a[i + 2], a[i + 3]));
            proxied(
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            )
        }
        2 if len >= 36 => {
            let ip = |i: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&a[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            proxied(
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            )
        }
        _ => None,
    };
    match addresses {
        Some(addresses) => Parsed::Header {
            version: 2,
            len: total,
            addresses,
        },
        None => Parsed::Error(2),
    }
}

/// Why a connection is closed before its filter chain.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused;

/// Reads the connection's header (leaving the bytes after it unread): its
/// addresses, `Own` when the connection may go on without one, `Err` when
/// it is closed (counted).
pub async fn read(
    stream: &mut TcpStream,
    config: &ProxyProtocol,
    stats: &Stats,
) -> Result<Addresses, Refused> {
    let mut buf = [0u8; MAX];
    loop {
        let n = match stream.peek(&mut buf).await {
            Ok(0) | Err(_) => return Err(Refused),
            Ok(n) => n,
        };
        let (version, len, addresses) = match parse(&buf[..n]) {
            Parsed::More if n < MAX => {
                // The rest of the header has not come yet: peeking again at
                // once would see the same bytes.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                continue;
            }
            Parsed::More => return fail(&stats.v2),
            Parsed::NotFound if config.allow_without => {
                stats.not_found_allowed.inc();
                return Ok(Addresses::Own);
            }
            Parsed::NotFound => {
                stats.not_found_disallowed.inc();
                legacy_error().inc();
                return Err(Refused);
            }
            Parsed::Error(v) => return fail(if v == 1 { &stats.v1 } else { &stats.v2 }),
            Parsed::Header {
                version,
                len,
                addresses,
            } => (version, len, addresses),
        };
        let (vs, allowed) = if version == 1 {
            (&stats.v1, config.v1)
        } else {
            (&stats.v2, config.v2)
        };
        if !allowed {
            // Envoy: a refused version on a listener that takes connections
            // without a header is no header at all (its bytes go on as the
            // connection's); otherwise the connection is closed.
            if config.allow_without {
                stats.not_found_allowed.inc();
                return Ok(Addresses::Own);
            }
            vs.disallowed.inc();
            return Err(Refused);
        }
        // Consume exactly the header; what follows is the connection's.
        let mut header = vec![0u8; len];
        if stream.read_exact(&mut header).await.is_err() {
            return Err(Refused);
        }
        vs.found.inc();
        return Ok(addresses);
    }
}

fn fail(vs: &VersionStats) -> Result<Addresses, Refused> {
    vs.error.inc();
    legacy_error().inc();
    Err(Refused)
}

#[cfg(test)]
#[path = "proxy_protocol_tests.rs"]
mod tests;
