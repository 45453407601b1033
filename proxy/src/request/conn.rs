//! Facts about a downstream connection that the stages below the codec read
//! ([`ConnInfo`]), and the listener config lookups they share.

use courier_config::listener::{FilterChain, Listener};
use http::{HeaderMap, Request, Uri, header};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// One end of a downstream connection: an IP socket address, or a Unix domain
/// socket (Envoy's `pipe` listeners and admin). A pipe's client is unnamed,
/// so Envoy names both ends of a pipe connection by the listening socket's
/// path (`%DOWNSTREAM_REMOTE_ADDRESS%` prints it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// A TCP connection's end.
    Ip(SocketAddr),
    /// A Unix domain socket, by its path (`@name`: abstract).
    Pipe(Arc<str>),
}

impl Peer {
    /// The IP address, for a TCP end.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Peer::Ip(a) => Some(a.ip()),
            Peer::Pipe(_) => None,
        }
    }

    /// The port, for a TCP end.
    pub fn port(&self) -> Option<u16> {
        match self {
            Peer::Ip(a) => Some(a.port()),
            Peer::Pipe(_) => None,
        }
    }

    /// The socket address, for a TCP end.
    pub fn socket(&self) -> Option<SocketAddr> {
        match self {
            Peer::Ip(a) => Some(*a),
            Peer::Pipe(_) => None,
        }
    }

    /// As Envoy prints an address without its port: the IP, or the path.
    pub fn without_port(&self) -> PeerWithoutPort<'_> {
        PeerWithoutPort(self)
    }
}

/// `ip:port` (`[ip]:port`), or the pipe's path, as Envoy prints addresses.
impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Ip(a) => a.fmt(f),
            Peer::Pipe(p) => f.write_str(p),
        }
    }
}

/// [`Peer::without_port`].
pub struct PeerWithoutPort<'a>(&'a Peer);

impl std::fmt::Display for PeerWithoutPort<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Peer::Ip(a) => a.ip().fmt(f),
            Peer::Pipe(p) => f.write_str(p),
        }
    }
}

/// Facts about a downstream connection that requests on it need.
#[derive(Debug)]
pub struct ConnInfo {
    /// The listener (the version the connection was accepted under).
    pub listener: Arc<courier_config::listener::Listener>,
    /// The peer's address.
    pub peer: Peer,
    /// Our address on the connection.
    pub local: Peer,
    /// Whether the connection is TLS (`x-forwarded-proto: https`).
    pub tls: bool,
    /// Whether its client presented a certificate (mutual TLS:
    /// `forward_client_cert_details`).
    pub mtls: bool,
    /// The client certificate's details for `x-forwarded-client-cert`, when
    /// the connection manager writes them (`APPEND_FORWARD`, `SANITIZE_SET`)
    /// and the client presented a certificate.
    pub client_cert: Option<Box<str>>,
    /// Index of the connection's filter chain: in `filter_chains`, or one past
    /// the last for `default_filter_chain` (see `filter_chain::chain_at`).
    pub filter_chain_index: usize,
    /// The TLS client's SNI, if any.
    pub server_name: Option<String>,
    /// The ClientHello's JA3 / JA4 fingerprints, when the listener's
    /// `tls_inspector` computes them.
    pub fingerprints: Option<std::sync::Arc<crate::tls::fingerprint::Fingerprints>>,
    /// The connection's id (`%CONNECTION_ID%`), unique in the process.
    pub id: u64,
    /// What HTTP filters see of the connection.
    pub facts: courier_filters::ConnFacts,
    /// The connection manager's HTTP filter chain, when it has filters to run.
    pub http_filters: Option<Arc<courier_filters::FilterChain>>,
    /// The listener's `per_connection_buffer_limit_bytes`: as in Envoy, the
    /// most request body held for retries when the route sets no limit.
    pub buffer_limit: u64,
    /// The connection's counters for its listener's log line, when the
    /// listener has access logs.
    pub wire: Option<std::sync::Arc<crate::request::wire::Wire>>,
}

/// The next connection id (one relaxed increment per connection, not per request).
pub fn next_connection_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The filter chain at `index` in [`Listener::all_filter_chains`] order
/// (`filter_chains`, then `default_filter_chain`).
pub fn chain_at(listener: &Listener, index: usize) -> Option<&FilterChain> {
    match listener.filter_chains.get(index) {
        Some(fc) => Some(fc),
        None if index == listener.filter_chains.len() => listener.default_filter_chain.as_deref(),
        None => None,
    }
}

/// The client address the connection manager took from the request's
/// headers (`x-forwarded-for`, an original IP detection extension), in the
/// request's extensions: Envoy's downstream remote address from then on
/// (`%DOWNSTREAM_REMOTE_ADDRESS%`, port 0), while the `DIRECT` commands keep
/// the socket peer. Absent: the peer is the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub std::net::SocketAddr);

/// `:authority`: the URI's authority (HTTP/2, absolute-form) or the `host` header.
pub fn authority<B>(req: &Request<B>) -> Option<&str> {
    authority_of(req.uri(), req.headers())
}

/// `:authority` from a request head's parts.
pub fn authority_of<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> Option<&'a str> {
    uri.authority()
        .map(|a| a.as_str())
        .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe end costs a TCP connection nothing: `Peer` takes no more room
    /// than the `SocketAddr` it replaced (the pipe variant sits in its niche).
    #[test]
    fn a_peer_is_the_size_of_a_socket_address() {
        assert_eq!(
            std::mem::size_of::<Peer>(),
            std::mem::size_of::<SocketAddr>()
        );
    }

    #[test]
    fn peers_print_as_envoy_prints_addresses() {
        let ip = Peer::Ip("[::1]:80".parse().unwrap());
        assert_eq!(ip.to_string(), "[::1]:80");
        assert_eq!(ip.without_port().to_string(), "::1");
        let pipe = Peer::Pipe(Arc::from("/run/l.sock"));
        assert_eq!(pipe.to_string(), "/run/l.sock");
        assert_eq!(pipe.without_port().to_string(), "/run/l.sock");
        assert_eq!((pipe.ip(), pipe.port()), (None, None));
    }
}
