//! The connection manager's request rules (Envoy's `mutateRequestHeaders`):
//! `x-forwarded-for` and the trusted client address, internal vs external
//! requests, `x-forwarded-proto`, `x-envoy-external-address`, stripping Envoy's
//! control headers from edge requests, and `x-request-id`.

use crate::request::conn::{ConnInfo, Peer};
use courier_config::listener::hcm::{ForwardClientCert, HttpConnectionManager, InternalAddresses};
use courier_config::listener::ip_detection::IpDetection;
use courier_config::matcher::Cidr;
use http::header::{Entry, HeaderMap, HeaderName, HeaderValue};
use std::net::IpAddr;

const XFF: HeaderName = HeaderName::from_static("x-forwarded-for");
const XFP: HeaderName = HeaderName::from_static("x-forwarded-proto");
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const INTERNAL: HeaderName = HeaderName::from_static("x-envoy-internal");
const EXTERNAL_ADDRESS: HeaderName = HeaderName::from_static("x-envoy-external-address");
const XFCC: HeaderName = HeaderName::from_static("x-forwarded-client-cert");

/// Removed from every request that is not internal. `x-envoy-force-trace` too, as
/// Envoy 1.40 (`cleanInternalHeaders`; checked by `tests/tracing_differential.rs`).
const NOT_INTERNAL: &[&str] = &[
    "x-envoy-decorator-operation",
    "x-envoy-downstream-service-cluster",
    "x-envoy-downstream-service-node",
    "x-envoy-force-trace",
];

/// Envoy's control headers, removed from edge requests (external, with
/// `use_remote_address`).
const EDGE_STRIPPED: &[&str] = &[
    "x-envoy-retry-on",
    "x-envoy-retry-grpc-on",
    "x-envoy-max-retries",
    "x-envoy-upstream-alt-stat-name",
    "x-envoy-upstream-rq-timeout-ms",
    "x-envoy-upstream-rq-per-try-timeout-ms",
    "x-envoy-upstream-rq-timeout-alt-response",
    "x-envoy-expected-rq-timeout-ms",
    "x-envoy-ip-tags",
    "x-envoy-original-url",
    "x-envoy-hedge-on-per-try-timeout",
];

/// Applies the rules to a request's headers; `internal_only` are the route
/// config's `internal_only_headers`. Returns the trusted client address (Envoy's
/// final remote address: the socket peer when the XFF rules yield none), and
/// whether the request may still carry Envoy's control headers (`x-envoy-*` kept on
/// an internal request), so that callers skip looking them up otherwise.
/// The third value says the address came from the headers (XFF, a detection
/// extension) rather than the socket peer. `Err` with a status when an
/// `original_ip_detection_extensions` entry refuses the request
/// (`reject_with_status`).
pub fn mutate_request(
    headers: &mut HeaderMap,
    hcm: &HttpConnectionManager,
    internal_only: &[String],
    conn: &ConnInfo,
) -> Result<(IpAddr, bool, bool), u16> {
    let hops = hcm.xff_num_trusted_hops as usize;
    let tls_proto = HeaderValue::from_static(if conn.tls { "https" } else { "http" });
    // One pass over the names: most requests carry neither an XFF nor an Envoy
    // header, and each lookup by a non-standard name hashes all its bytes.
    let (mut has_xff, mut has_envoy, mut has_xfcc) = (false, false, false);
    for k in headers.keys() {
        has_xff |= *k == XFF;
        has_envoy |= k.as_str().starts_with("x-envoy-");
        has_xfcc |= *k == XFCC;
    }
    // Envoy's `mutateXfccRequestHeader`: kept, written or removed as the mode
    // says; every mode but `ALWAYS_FORWARD_ONLY` removes it on a connection
    // without a client certificate.
    match (hcm.forward_client_cert, conn.client_cert.as_deref()) {
        (ForwardClientCert::AlwaysForwardOnly, _) if has_xfcc => coalesce(headers, XFCC),
        (ForwardClientCert::AlwaysForwardOnly, _) => {}
        (ForwardClientCert::ForwardOnly, _) if conn.mtls && has_xfcc => coalesce(headers, XFCC),
        (ForwardClientCert::ForwardOnly, _) if conn.mtls => {}
        (ForwardClientCert::AppendForward, Some(details)) if conn.mtls => {
            if has_xfcc {
                coalesce(headers, XFCC);
            }
            append_xfcc(headers, details);
        }
        (ForwardClientCert::SanitizeSet, Some(details)) if conn.mtls => {
            if let Ok(v) = HeaderValue::from_str(details) {
                headers.insert(XFCC, v);
            }
        }
        _ if has_xfcc => {
            headers.remove(&XFCC);
        }
        _ => {}
    }
    // The final address is the socket peer's (use_remote_address without a
    // trusted XFF entry).
    let mut from_peer = false;
    let (final_remote, trusted_checks) = if hcm.use_remote_address {
        let no_xff = !has_xff;
        let from_xff = if hops > 0 {
            xff_entry(headers, hops - 1).0
        } else {
            None
        };
        if !hcm.skip_xff_append {
            append_peer(headers, conn);
        }
        if hops == 0 || !headers.contains_key(&XFP) {
            headers.insert(XFP, tls_proto.clone());
        }
        match from_xff {
            Some(ip) => (Remote::Ip(ip), no_xff),
            None => {
                from_peer = true;
                (Remote::of(&conn.peer), no_xff)
            }
        }
    } else if !hcm.ip_detection.is_empty() {
        let found = detect(headers, &hcm.ip_detection, conn)?;
        // An XFF extension with `skip_xff_append: false` appends the peer
        // after detection, found or not (as Envoy 1.40 does).
        if hcm
            .ip_detection
            .iter()
            .any(|e| matches!(e, IpDetection::Xff { append: true, .. }))
        {
            append_peer(headers, conn);
        }
        found
    } else if has_xff {
        let (ip, single) = xff_entry(headers, hops);
        (ip.map_or(Remote::None, Remote::Ip), single)
    } else {
        (Remote::None, false)
    };
    // One lookup for the test and the insert.
    headers.entry(XFP).or_insert(tls_proto);
    let internal = trusted_checks
        && match final_remote {
            Remote::Ip(a) => is_internal(&hcm.internal_addresses, a),
            // `internal_address_config.unix_sockets`: false unless set.
            Remote::Pipe => hcm.internal_unix_sockets,
            Remote::None => false,
        };
    let edge = !internal && hcm.use_remote_address;
    if internal {
        headers.insert(INTERNAL, HeaderValue::from_static("true"));
    } else {
        // Most requests carry no Envoy header (see the pass above), and each
        // removal by name parses and hashes that name.
        if has_envoy {
            for h in NOT_INTERNAL {
                headers.remove(*h);
            }
            if edge {
                for h in EDGE_STRIPPED {
                    headers.remove(*h);
                }
            }
            headers.remove(INTERNAL);
        }
        for h in internal_only {
            headers.remove(h.as_str());
        }
    }
    // Only an IP final address is written (Envoy: not a pipe's).
    if edge && let Remote::Ip(addr) = final_remote {
        headers.insert(EXTERNAL_ADDRESS, ip_text(addr));
    }
    if hcm.generate_request_id {
        let replace = edge && !hcm.preserve_external_request_id;
        // One lookup for the test and the insert.
        let entry = headers.entry(REQUEST_ID);
        let vacant = matches!(entry, Entry::Vacant(_));
        if (vacant || replace)
            && let Ok(v) = HeaderValue::from_bytes(&uuid_v4())
        {
            match entry {
                Entry::Vacant(e) => {
                    e.insert(v);
                }
                Entry::Occupied(mut e) => {
                    e.insert(v);
                }
            }
        }
    }
    // Taken from the headers (not the socket peer, the fallback).
    let from_headers = !from_peer && matches!(final_remote, Remote::Ip(_));
    let remote = match final_remote {
        Remote::Ip(ip) => ip,
        // A pipe peer has no IP: the unspecified address stands in (the data
        // plane refuses the filters that match on it on pipe listeners).
        _ => conn
            .peer
            .ip()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)),
    };
    Ok((remote, internal && has_envoy, from_headers))
}

/// Runs the detection extensions in order: the first address found, with
/// whether it may make the request internal; `Err` when one refuses.
/// Appends the downstream peer to `x-forwarded-for`: Envoy's own address for a
/// loopback peer, nothing for a pipe peer (no IP).
fn append_peer(headers: &mut HeaderMap, conn: &ConnInfo) {
    if let Some(peer) = conn.peer.ip() {
        let appended = if peer.is_loopback() {
            local_address().or(conn.local.ip()).unwrap_or(peer)
        } else {
            peer
        };
        append_xff(headers, appended);
    }
}

fn detect(
    headers: &HeaderMap,
    extensions: &[IpDetection],
    conn: &ConnInfo,
) -> Result<(Remote, bool), u16> {
    for extension in extensions {
        match extension {
            IpDetection::Xff {
                hops,
                trusted_cidrs: None,
                ..
            } => {
                if let (Some(ip), single) = xff_entry(headers, *hops as usize) {
                    return Ok((Remote::Ip(ip), single));
                }
            }
            IpDetection::Xff {
                trusted_cidrs: Some(cidrs),
                ..
            } => {
                // Only a peer inside the trusted ranges is believed.
                let trusted_peer = conn
                    .peer
                    .ip()
                    .is_some_and(|p| cidrs.iter().any(|c| c.contains(p)));
                if trusted_peer && let Some(found) = last_untrusted(headers, cidrs) {
                    return Ok(found);
                }
            }
            IpDetection::CustomHeader {
                header,
                trusted,
                reject_status,
            } => {
                let ip = headers
                    .get(header.as_str())
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<IpAddr>().ok());
                match (ip, reject_status) {
                    (Some(ip), _) => return Ok((Remote::Ip(ip), *trusted)),
                    (None, Some(status)) => return Err(*status),
                    (None, None) => {}
                }
            }
        }
    }
    Ok((Remote::None, false))
}

/// Envoy's `getLastNonTrustedAddressFromXFF`: from the right, the first XFF
/// entry outside `cidrs` (trusted checks allowed when XFF holds only it); the
/// leftmost when all are inside; nothing when an entry is not an address.
fn last_untrusted(headers: &HeaderMap, cidrs: &[Cidr]) -> Option<(Remote, bool)> {
    let xff = headers.get(&XFF).and_then(|v| v.to_str().ok())?;
    let entries: Vec<&str> = xff.split(',').map(str::trim).collect();
    let mut last = None;
    for entry in entries.iter().rev() {
        let ip: IpAddr = entry.parse().ok()?;
        last = Some(ip);
        if !cidrs.iter().any(|c| c.contains(ip)) {
            return Some((Remote::Ip(ip), entries.len() == 1));
        }
    }
    last.map(|ip| (Remote::Ip(ip), false))
}

/// Envoy's final remote address: an IP, a pipe (the socket peer of a pipe
/// listener), or none (no XFF to take one from).
#[derive(Clone, Copy)]
enum Remote {
    Ip(IpAddr),
    Pipe,
    None,
}

impl Remote {
    fn of(peer: &Peer) -> Self {
        match peer.ip() {
            Some(ip) => Remote::Ip(ip),
            None => Remote::Pipe,
        }
    }
}

/// The XFF entry `skip` places from the right, and whether XFF holds one address.
fn xff_entry(headers: &HeaderMap, skip: usize) -> (Option<IpAddr>, bool) {
    let Some(xff) = headers.get(&XFF).and_then(|v| v.to_str().ok()) else {
        return (None, false);
    };
    let entries: Vec<&str> = xff.split(',').map(str::trim).collect();
    let single = entries.len() == 1;
    let addr = entries
        .len()
        .checked_sub(skip + 1)
        .and_then(|i| entries.get(i))
        .and_then(|e| e.parse().ok());
    (addr, single)
}

fn append_xff(headers: &mut HeaderMap, ip: IpAddr) {
    let value = match headers.get(&XFF).and_then(|v| v.to_str().ok()) {
        Some(old) if !old.is_empty() => format!("{old},{ip}"),
        _ => {
            headers.insert(XFF, ip_text(ip));
            return;
        }
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.insert(XFF, v);
    }
}

/// `ip` as a header value. A connection's requests carry the same peer (and
/// every request the same local address): the text of the last two addresses
/// is kept per thread instead of formatted per request.
fn ip_text(ip: IpAddr) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<[Option<(IpAddr, HeaderValue)>; 2]> =
            const { std::cell::RefCell::new([None, None]) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some((_, v)) = last.iter().flatten().find(|(a, _)| *a == ip) {
            return v.clone();
        }
        let v =
            HeaderValue::from_str(&ip.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""));
        last.swap(0, 1);
        last[0] = Some((ip, v.clone()));
        v
    })
}

/// Envoy 1.40 treats no address as internal unless `internal_address_config`
/// lists it (the RFC 1918 default is gone: `explicit_internal_address_config`).
fn is_internal(config: &InternalAddresses, ip: IpAddr) -> bool {
    match config {
        InternalAddresses::Default => false,
        InternalAddresses::Ranges(ranges) => ranges.iter().any(|r| r.contains(ip)),
    }
}

/// The machine's address as Envoy's `local_info` has it (the address of the
/// interface with the default route), found once.
fn local_address() -> Option<IpAddr> {
    static ADDR: std::sync::OnceLock<Option<IpAddr>> = std::sync::OnceLock::new();
    *ADDR.get_or_init(|| {
        // Connecting a UDP socket sends nothing; it only picks the source address.
        let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        s.connect("192.0.2.1:9").ok()?;
        let ip = s.local_addr().ok()?.ip();
        (!ip.is_unspecified()).then_some(ip)
    })
}

/// A random (version 4) UUID's text, in a fixed array: a request id costs one
/// allocation (the header value's) instead of a string's and then a copy.
pub fn uuid_v4() -> [u8; 36] {
    let mut b: [u8; 16] = fastrand::u128(..).to_le_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let mut out = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        if let Some(pair) = out.get_mut(at..at + 2) {
            pair.copy_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
        }
        at += 2;
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `details` to the request's `x-forwarded-client-cert` (one value
/// by now), `,`-separated, or sets it.
fn append_xfcc(headers: &mut HeaderMap, details: &str) {
    let value = match headers.get(&XFCC) {
        Some(v) if !v.is_empty() => {
            let mut joined = v.as_bytes().to_vec();
            joined.push(b',');
            joined.extend_from_slice(details.as_bytes());
            HeaderValue::from_bytes(&joined)
        }
        _ => HeaderValue::from_str(details),
    };
    if let Ok(v) = value {
        headers.insert(XFCC, v);
    }
}

/// Joins a repeated header's values into one, `,`-separated: Envoy keeps its
/// inline headers (`x-forwarded-client-cert` among them) as one value, so a
/// request that repeats one reaches the upstream with one line.
fn coalesce(headers: &mut HeaderMap, name: HeaderName) {
    if let Entry::Occupied(mut e) = headers.entry(name) {
        let mut values = e.iter();
        let Some(first) = values.next() else { return };
        let mut joined = first.as_bytes().to_vec();
        let mut repeated = false;
        for v in values {
            repeated = true;
            joined.push(b',');
            joined.extend_from_slice(v.as_bytes());
        }
        if repeated && let Ok(v) = HeaderValue::from_bytes(&joined) {
            e.insert(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_texts_are_kept_for_the_last_two_addresses() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "::1".parse().unwrap();
        let c: IpAddr = "192.0.2.7".parse().unwrap();
        for ip in [a, b, a, c, b, c, a] {
            assert_eq!(ip_text(ip), ip.to_string().as_str());
        }
    }

    #[test]
    fn uuids_are_version_4() {
        let u = String::from_utf8(uuid_v4().to_vec()).unwrap();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"), "{u}");
        let groups: Vec<usize> = u.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{u}");
        assert!(u.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()), "{u}");
        assert_ne!(uuid_v4(), uuid_v4());
    }

    #[test]
    fn xff_entries_from_the_right() {
        let mut h = HeaderMap::new();
        h.insert(XFF, HeaderValue::from_static("1.1.1.1, 2.2.2.2,3.3.3.3"));
        assert_eq!(xff_entry(&h, 0), (Some("3.3.3.3".parse().unwrap()), false));
        assert_eq!(xff_entry(&h, 2), (Some("1.1.1.1".parse().unwrap()), false));
        assert_eq!(xff_entry(&h, 3), (None, false));
    }
}
