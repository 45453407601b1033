//! The PROXY protocol header of `upstream_proxy_protocol`: written at the start
//! of each new upstream connection, before TLS, naming the downstream
//! connection the request (or TCP stream) came on, as Envoy's
//! `UpstreamProxyProtocolSocket` writes it.

use crate::request::conn::Peer;
use courier_config::cluster::ProxyProtocolVersion;
use std::net::{IpAddr, SocketAddr};

/// The v2 header's signature.
pub const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// The downstream connection's addresses a header names. Requests carry it
/// to the pool (in their extensions), which keeps connections of different
/// downstream connections apart, as Envoy keys its pools by these addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Downstream {
    /// The client's address (the source).
    pub source: SocketAddr,
    /// The address the client reached (the destination).
    pub destination: SocketAddr,
    /// The downstream connection's id: what the pool keys by (two connections
    /// at once never have the same addresses, and an id keeps the key small).
    pub connection: u64,
}

impl Downstream {
    /// The addresses of downstream connection `connection` from `peer` to
    /// `local`; none for a Unix domain socket (Envoy's header names IP
    /// addresses only).
    pub fn of(peer: &Peer, local: &Peer, connection: u64) -> Option<Self> {
        match (peer, local) {
            (Peer::Ip(source), Peer::Ip(destination)) => Some(Downstream {
                source: *source,
                destination: *destination,
                connection,
            }),
            _ => None,
        }
    }

    /// Its part of a pool key: never 0, which is "no downstream connection".
    pub fn pool_id(d: Option<&Downstream>) -> u64 {
        d.map_or(0, |d| d.connection.wrapping_add(1).max(1))
    }
}

/// The header for a connection from `own` (its local and remote addresses)
/// on behalf of `downstream`. Without a downstream connection (health
/// checks, courier's own calls) Envoy writes a v2 `LOCAL` header, and a v1
/// header naming the upstream connection's own addresses.
pub fn encode(
    version: ProxyProtocolVersion,
    downstream: Option<Downstream>,
    own: Downstream,
) -> Vec<u8> {
    match (version, downstream) {
        (ProxyProtocolVersion::V1, d) => v1(d.unwrap_or(own)),
        (ProxyProtocolVersion::V2, Some(d)) => v2(d),
        (ProxyProtocolVersion::V2, None) => {
            let mut out = V2_SIGNATURE.to_vec();
            // Version 2, LOCAL; unspecified family; no addresses.
            out.extend_from_slice(&[0x20, 0x00, 0, 0]);
            out
        }
    }
}

fn v1(d: Downstream) -> Vec<u8> {
    let family = if d.source.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {} {} {} {}\r\n",
        d.source.ip(),
        d.destination.ip(),
        d.source.port(),
        d.destination.port()
    )
    .into_bytes()
}

fn v2(d: Downstream) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    // Version 2, PROXY.
    out.push(0x21);
    // The source's family names the block, as Envoy's header does; a
    // destination of the other family is written in it (v4 as v4-mapped v6,
    // v6 as its v4 form when it has one).
    match d.source.ip() {
        IpAddr::V4(src) => {
            out.extend_from_slice(&[0x11, 0, 12]);
            out.extend_from_slice(&src.octets());
            let dst = match d.destination.ip() {
                IpAddr::V4(v4) => v4,
                IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            };
            out.extend_from_slice(&dst.octets());
        }
        IpAddr::V6(src) => {
            out.extend_from_slice(&[0x21, 0, 36]);
            out.extend_from_slice(&src.octets());
            let dst = match d.destination.ip() {
                IpAddr::V6(v6) => v6,
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            };
            out.extend_from_slice(&dst.octets());
        }
    }
    out.extend_from_slice(&d.source.port().to_be_bytes());
    out.extend_from_slice(&d.destination.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(src: &str, dst: &str) -> Downstream {
        Downstream {
            source: src.parse().unwrap(),
            destination: dst.parse().unwrap(),
            connection: 7,
        }
    }

    #[test]
    fn v1_names_the_downstream_or_the_connection_itself() {
        let own = addrs("127.0.0.1:4000", "127.0.0.2:80");
        let d = addrs("10.0.0.1:1234", "10.0.0.2:443");
        assert_eq!(
            encode(ProxyProtocolVersion::V1, Some(d), own),
            b"PROXY TCP4 10.0.0.1 10.0.0.2 1234 443\r\n"
        );
        assert_eq!(
            encode(ProxyProtocolVersion::V1, None, own),
            b"PROXY TCP4 127.0.0.1 127.0.0.2 4000 80\r\n"
        );
        let d6 = addrs("[::1]:5", "[2001:db8::2]:6");
        assert_eq!(
            encode(ProxyProtocolVersion::V1, Some(d6), own),
            b"PROXY TCP6 ::1 2001:db8::2 5 6\r\n"
        );
    }

    #[test]
    fn v2_is_proxy_with_addresses_or_local_without() {
        let own = addrs("127.0.0.1:4000", "127.0.0.2:80");
        let d = addrs("10.0.0.1:1234", "10.0.0.2:443");
        let mut want = V2_SIGNATURE.to_vec();
        want.extend_from_slice(&[
            0x21, 0x11, 0, 12, 10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0xd2, 0x01, 0xbb,
        ]);
        assert_eq!(encode(ProxyProtocolVersion::V2, Some(d), own), want);
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0, 0, 0]);
        assert_eq!(encode(ProxyProtocolVersion::V2, None, own), local);
        let d6 = addrs("[::1]:5", "[::2]:6");
        let h = encode(ProxyProtocolVersion::V2, Some(d6), own);
        assert_eq!(h.len(), 16 + 36);
        assert_eq!(&h[12..16], &[0x21, 0x21, 0, 36]);
    }
}
