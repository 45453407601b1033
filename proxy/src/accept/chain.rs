//! Which filter chain of a listener takes a connection, and the connection's
//! transport (plaintext, or TLS terminated with that chain's certificate).
//!
//! Selection follows Envoy's `filter_chain_match` order for the criteria courier
//! supports: server name (exact, then `*.suffix` wildcards longest first, then
//! chains without `server_names`), transport protocol (`tls`/`raw_buffer`, then
//! chains without one), application protocols (the client's ALPN list in its
//! order, then chains without any). Each step narrows the candidates and never
//! backtracks: a connection whose SNI matches chain A exactly is not given to a
//! wildcard chain B because A's transport protocol did not fit. If nothing is left,
//! the listener's `default_filter_chain` takes the connection, or it is closed.
//!
//! Envoy needs a `tls_inspector` listener filter (which it adds itself when a
//! chain matches on TLS facts) to read SNI and ALPN; courier reads them the same
//! way, from the first byte (0x16: a TLS handshake record) and the ClientHello.

use crate::request::conn::chain_at;
use crate::tls::{DownstreamStream, ServerConfigs};
use courier_config::listener::{FilterChain, Listener, TransportProtocol};
use rustls::server::Acceptor;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;

/// How long a connection has to show its first byte and finish the TLS
/// handshake (Envoy's `listener_filters_timeout` default: 15 s).
pub(crate) const ACCEPT_TIMEOUT: Duration = Duration::from_secs(15);

/// The first byte of a TLS record carrying a handshake message.
const TLS_HANDSHAKE: u8 = 0x16;

/// What chain selection looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectionFacts<'a> {
    /// The client started a TLS handshake.
    pub tls: bool,
    /// SNI from the ClientHello, lower-cased.
    pub server_name: Option<&'a str>,
    /// ALPN protocols the client offered, in its order.
    pub alpn: &'a [Vec<u8>],
}

/// Whether any chain matches on something, so the connection must be inspected
/// before a chain can be chosen. Without criteria at most one chain is there
/// (the config refuses duplicate matches), and it takes every connection.
fn needs_inspection(listener: &Listener) -> bool {
    listener
        .filter_chains
        .iter()
        // The SNI dynamic forward proxy needs the SNI whatever the match.
        .any(|fc| fc.filter_chain_match != Default::default() || fc.sni_dfp.is_some())
}

/// Whether a TLS client may be passed through (a chain that proxies TCP
/// without terminating TLS).
fn may_pass_through(listener: &Listener) -> bool {
    listener
        .filter_chains
        .iter()
        .chain(listener.default_filter_chain.as_deref())
        .any(|fc| fc.tls.is_none() && fc.tcp_proxy().is_some())
}

/// The index (in [`chain_at`] order) of the chain that takes a connection with
/// `facts`, or `None` when none does and there is no default chain.
pub fn select(listener: &Listener, facts: &ConnectionFacts<'_>) -> Option<usize> {
    let chains = &listener.filter_chains;
    // Step 1: server name. Exact, then wildcards from the longest suffix.
    let name_key: Option<String> = facts.server_name.and_then(|sni| {
        let has = |n: &str| {
            chains
                .iter()
                .any(|c| c.filter_chain_match.server_names.iter().any(|s| s == n))
        };
        if has(sni) {
            return Some(sni.to_string());
        }
        // "a.b.example.com" tries "*.b.example.com", "*.example.com", "*.com".
        sni.char_indices()
            .filter(|&(i, c)| c == '.' && i > 0)
            .map(|(i, _)| format!("*{}", &sni[i..]))
            .find(|w| has(w))
    });
    let by_name = |c: &FilterChain| match &name_key {
        Some(n) => c.filter_chain_match.server_names.iter().any(|s| s == n),
        None => c.filter_chain_match.server_names.is_empty(),
    };
    // Step 2: transport protocol, then chains that do not constrain it.
    let detected = if facts.tls {
        TransportProtocol::Tls
    } else {
        TransportProtocol::RawBuffer
    };
    let specific = chains
        .iter()
        .any(|c| by_name(c) && c.filter_chain_match.transport_protocol == Some(detected));
    let want_tp = specific.then_some(detected);
    let by_tp = |c: &FilterChain| by_name(c) && c.filter_chain_match.transport_protocol == want_tp;
    // Step 3: the first ALPN protocol of the client's that some chain names.
    let offers = |c: &FilterChain, p: &[u8]| {
        c.filter_chain_match
            .application_protocols
            .iter()
            .any(|a| a.as_bytes() == p)
    };
    let alpn_key = facts
        .alpn
        .iter()
        .find(|p| chains.iter().any(|c| by_tp(c) && offers(c, p)));
    let by_alpn = |c: &FilterChain| match alpn_key {
        Some(p) => offers(c, p),
        None => c.filter_chain_match.application_protocols.is_empty(),
    };
    chains
        .iter()
        .position(|c| by_tp(c) && by_alpn(c))
        .or_else(|| listener.default_filter_chain.as_ref().map(|_| chains.len()))
}

/// A connection ready for HTTP.
#[derive(Debug)]
pub struct Accepted {
    /// The (possibly TLS) stream.
    pub stream: DownstreamStream,
    /// The chain that took it, in [`chain_at`] order.
    pub filter_chain_index: usize,
    /// The ALPN protocol negotiated over TLS, if any.
    pub alpn: Option<Vec<u8>>,
    /// The SNI the TLS client sent, lower-cased (`%REQUESTED_SERVER_NAME%`).
    pub server_name: Option<String>,
    /// The ClientHello's JA3 / JA4 fingerprints, when the listener's
    /// `tls_inspector` asks for them.
    pub fingerprints: Option<std::sync::Arc<crate::tls::fingerprint::Fingerprints>>,
}

/// Why a connection was closed before HTTP.
#[derive(Debug)]
pub enum Refused {
    /// No chain matched and there is no default chain; the SNI the TLS
    /// client sent, if it sent one (the listener's log line names it).
    NoFilterChainMatch(Option<String>),
    /// A plaintext connection on a TLS chain, or TLS on a plaintext chain.
    TransportMismatch,
    /// The client closed, or the TLS handshake failed.
    Io(std::io::Error),
    /// The TLS config of the chain could not be built.
    Config(String),
    /// No first byte or no finished handshake within the accept timeout.
    Timeout,
    /// The TLS handshake did not finish within the chain's
    /// `transport_socket_connect_timeout`.
    TransportSocketConnectTimeout,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoFilterChainMatch(_) => f.write_str("no filter chain matches"),
            Self::TransportMismatch => f.write_str("transport does not fit the filter chain"),
            Self::Io(e) => write!(f, "{e}"),
            Self::Config(e) => write!(f, "TLS config: {e}"),
            Self::Timeout => f.write_str("no TLS handshake or first byte in time"),
            Self::TransportSocketConnectTimeout => {
                f.write_str("TLS handshake not done within transport_socket_connect_timeout")
            }
        }
    }
}

/// Picks `listener`'s filter chain for `stream` and terminates TLS if the chain
/// has it. Reads the first byte and the ClientHello only when some chain
/// matches on them.
pub async fn accept(
    stream: TcpStream,
    listener: &Listener,
    tls: &ServerConfigs,
) -> Result<Accepted, Refused> {
    match tokio::time::timeout(ACCEPT_TIMEOUT, accept_inner(stream, listener, tls)).await {
        Ok(r) => r,
        Err(_) => Err(Refused::Timeout),
    }
}

/// Picks `listener`'s filter chain for a connection on a pipe (Unix domain
/// socket) listener: plaintext, and no chain matches on TLS facts there (the
/// data plane refuses TLS and chain criteria on pipe listeners), so the one
/// chain (or the default chain) takes it without reading a byte.
pub fn accept_unix(
    stream: tokio::net::UnixStream,
    listener: &Listener,
) -> Result<Accepted, Refused> {
    let index =
        select(listener, &ConnectionFacts::default()).ok_or(Refused::NoFilterChainMatch(None))?;
    match chain_at(listener, index) {
        Some(fc) if fc.tls.is_some() => Err(Refused::TransportMismatch),
        Some(_) => Ok(Accepted {
            stream: DownstreamStream::Unix(stream),
            filter_chain_index: index,
            alpn: None,
            server_name: None,
            fingerprints: None,
        }),
        None => Err(Refused::NoFilterChainMatch(None)),
    }
}

/// When the chain at `index` gives up on its TLS handshake: its
/// `transport_socket_connect_timeout` from now, if it has one.
fn connect_deadline(listener: &Listener, index: usize) -> Option<tokio::time::Instant> {
    chain_at(listener, index)
        .and_then(|fc| fc.transport_socket_connect_timeout)
        .map(|d| tokio::time::Instant::now() + d)
}

/// Runs a handshake step, failing it at `deadline` (if any).
async fn until<T>(
    deadline: Option<tokio::time::Instant>,
    step: impl Future<Output = std::io::Result<T>>,
) -> Result<T, Refused> {
    match deadline {
        None => step.await.map_err(Refused::Io),
        Some(at) => match tokio::time::timeout_at(at, step).await {
            Ok(r) => r.map_err(Refused::Io),
            Err(_) => Err(Refused::TransportSocketConnectTimeout),
        },
    }
}

async fn accept_inner(
    stream: TcpStream,
    listener: &Listener,
    configs: &ServerConfigs,
) -> Result<Accepted, Refused> {
    let inspect = needs_inspection(listener);
    // Envoy starts a chain's transport socket connect timer when it creates
    // the connection, after the listener filters: at once when no chain
    // matches on anything (no tls_inspector), after the ClientHello otherwise.
    let mut deadline = if inspect {
        None
    } else {
        select(listener, &ConnectionFacts::default()).and_then(|i| connect_deadline(listener, i))
    };
    let client_tls = if inspect {
        let mut first = [0u8; 1];
        if stream.peek(&mut first).await.map_err(Refused::Io)? == 0 {
            return Err(Refused::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        first[0] == TLS_HANDSHAKE
    } else {
        // The only chain decides; a plaintext client on a TLS chain fails the handshake.
        select(listener, &ConnectionFacts::default())
            .and_then(|i| chain_at(listener, i))
            .is_some_and(|fc| fc.tls.is_some())
    };
    if !client_tls {
        let facts = ConnectionFacts::default();
        let index = select(listener, &facts).ok_or(Refused::NoFilterChainMatch(None))?;
        return match chain_at(listener, index) {
            // Envoy would start the TLS handshake and fail it on the first bytes.
            Some(fc) if fc.tls.is_some() => Err(Refused::TransportMismatch),
            Some(_) => Ok(Accepted {
                stream: DownstreamStream::Plain(stream),
                filter_chain_index: index,
                alpn: None,
                server_name: None,
                fingerprints: None,
            }),
            None => Err(Refused::NoFilterChainMatch(None)),
        };
    }
    let wants = (listener.ja3, listener.ja4);
    let mut fingerprints = None;
    if (inspect && may_pass_through(listener)) || wants.0 || wants.1 {
        let hello = super::passthrough::peek_hello(&stream, wants).await?;
        fingerprints = hello.fingerprints.map(std::sync::Arc::new);
        let facts = ConnectionFacts {
            tls: true,
            server_name: hello.server_name.as_deref(),
            alpn: &hello.alpn,
        };
        let index = select(listener, &facts)
            .ok_or_else(|| Refused::NoFilterChainMatch(hello.server_name.clone()))?;
        if chain_at(listener, index).is_some_and(|fc| fc.tls.is_none() && fc.tcp_proxy().is_some())
        {
            // The handshake is the upstream's: the bytes stay on the socket.
            return Ok(Accepted {
                stream: DownstreamStream::Plain(stream),
                filter_chain_index: index,
                alpn: None,
                server_name: hello.server_name,
                fingerprints,
            });
        }
    }
    let start = until(
        deadline,
        LazyConfigAcceptor::new(Acceptor::default(), stream),
    )
    .await?;
    let hello = start.client_hello();
    let server_name = hello.server_name().map(str::to_ascii_lowercase);
    let alpn: Vec<Vec<u8>> = hello
        .alpn()
        .map(|ps| ps.map(<[u8]>::to_vec).collect())
        .unwrap_or_default();
    let facts = ConnectionFacts {
        tls: true,
        server_name: server_name.as_deref(),
        alpn: &alpn,
    };
    let index = if inspect {
        select(listener, &facts).ok_or_else(|| Refused::NoFilterChainMatch(server_name.clone()))?
    } else {
        select(listener, &ConnectionFacts::default()).ok_or(Refused::NoFilterChainMatch(None))?
    };
    let Some(chain_tls) = chain_at(listener, index).and_then(|fc| fc.tls.as_ref()) else {
        // TLS bytes on a plaintext chain: its HTTP codec would refuse them.
        return Err(Refused::TransportMismatch);
    };
    if inspect {
        deadline = connect_deadline(listener, index);
    }
    let config = configs.get(chain_tls).map_err(Refused::Config)?;
    let tls_stream = until(deadline, start.into_stream(config.for_client(&alpn))).await?;
    let negotiated = tls_stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    Ok(Accepted {
        stream: DownstreamStream::Tls(Box::new(tls_stream)),
        filter_chain_index: index,
        alpn: negotiated,
        server_name,
        fingerprints,
    })
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
