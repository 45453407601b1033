//! Access logs: one line per finished request, in Envoy's format-string or JSON
//! form, for each `access_log` of the connection manager (and admin).
//!
//! The request side is captured when the connection manager has answered
//! ([`Pending`]), the response side as the body streams ([`body::LoggedBody`]);
//! lines are rendered when the body ends and appended to this thread's buffer
//! ([`writer`]), which a timer flushes — nothing on the request path locks.

mod attributes;
mod batch;
pub mod body;
pub mod conn;
pub mod grpc_als;
pub mod otel;
pub mod render;
pub mod writer;

use crate::request::body::RequestProgress;
use crate::router::facts::Upstreamed;
use courier_config::listener::access_log::{AccessLog, Sink};
use http::{HeaderMap, Method, Uri, Version};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The logs a request goes to, found without copying them per request.
#[derive(Debug)]
pub enum Logs {
    /// A connection manager's `access_log`.
    Hcm {
        /// The listener the request was served by.
        listener: Arc<courier_config::listener::Listener>,
        /// The filter chain's index (see `filter_chain::chain_at`).
        filter_chain_index: usize,
    },
    /// Admin's `access_log`.
    Admin(Arc<[AccessLog]>),
    /// A TCP proxy's `access_log`: HTTP commands render as missing, as
    /// Envoy's do for a connection without a request.
    Tcp {
        /// The proxy's config.
        config: Arc<courier_config::listener::TcpProxy>,
        /// Upstream connect attempts (`%UPSTREAM_REQUEST_ATTEMPT_COUNT%`).
        attempts: u32,
    },
    /// A listener's `access_log`: a connection's line, rendered as a TCP
    /// proxy's (no request), with the HTTP version its requests spoke.
    Listener {
        /// The listener (the version the connection was accepted under).
        listener: Arc<courier_config::listener::Listener>,
        /// Upstream connect attempts of a TCP proxy connection.
        attempts: u32,
        /// The HTTP version the connection spoke (`%PROTOCOL%`), if any.
        protocol: Option<Version>,
    },
    /// A UDP proxy's session `access_log`: what Envoy's session stream info
    /// holds (addresses, the host, bytes, times and the `udp.proxy.session`
    /// metadata); HTTP commands and the cluster render as missing, as Envoy's.
    Udp {
        /// The proxy's config.
        config: Arc<courier_config::listener::UdpProxy>,
        /// The session's upstream socket address (`%UPSTREAM_LOCAL_ADDRESS%`).
        upstream_local: Option<std::net::SocketAddr>,
        /// A `proxy_access_log` line (the filter's own, with no downstream).
        proxy: bool,
    },
}

impl Logs {
    fn get(&self) -> &[AccessLog] {
        match self {
            Logs::Hcm {
                listener,
                filter_chain_index,
            } => crate::request::conn::chain_at(listener, *filter_chain_index)
                .and_then(|fc| fc.hcm())
                .map_or(&[], |h| &h.access_log[..]),
            Logs::Admin(logs) => logs,
            Logs::Tcp { config, .. } => &config.access_log,
            Logs::Listener { listener, .. } => &listener.access_log,
            Logs::Udp {
                config,
                proxy: true,
                ..
            } => &config.proxy_access_log,
            Logs::Udp { config, .. } => &config.access_log,
        }
    }

    /// A connection's line (a TCP proxy's or a listener's): its upstream
    /// connect attempts and the HTTP version it spoke; `None` for a request's
    /// (and a UDP session's, which its own branch of the renderer draws).
    pub(crate) fn connection(&self) -> Option<(u32, Option<Version>)> {
        match self {
            Logs::Tcp { attempts, .. } => Some((*attempts, None)),
            Logs::Listener {
                attempts, protocol, ..
            } => Some((*attempts, *protocol)),
            Logs::Hcm { .. } | Logs::Admin(_) | Logs::Udp { .. } => None,
        }
    }
}

/// The matched route's name, kept on the response for the log.
#[derive(Debug, Clone)]
pub struct RouteName(pub String);

/// The request's dynamic metadata after the filters ran (`%DYNAMIC_METADATA(...)%`),
/// moved onto the response only when the request is logged.
#[derive(Debug, Clone, Default)]
pub struct DynamicMetadata(pub courier_config::core::MetadataMap);

/// Marks the response to a health check (the health check filter took the
/// request): access logs' `not_health_check_filter` leaves it out.
#[derive(Debug, Clone, Copy)]
pub struct HealthChecked;

/// Marks a direct response (`%RESPONSE_CODE_DETAILS%` `direct_response`).
#[derive(Debug, Clone, Copy)]
pub struct DirectResponse;

/// The request side of a log entry.
#[derive(Debug)]
pub struct Pending {
    /// Where the lines go.
    pub logs: Logs,
    /// Wall-clock start (`%START_TIME%`).
    pub start: SystemTime,
    /// Monotonic start (durations).
    pub started: Instant,
    /// The request method.
    pub method: Method,
    /// The request URI.
    pub uri: Uri,
    /// The request's HTTP version.
    pub version: Version,
    /// The request headers as the connection manager saw them.
    pub headers: HeaderMap,
    /// The downstream peer (`%DOWNSTREAM_DIRECT_REMOTE_ADDRESS%`).
    pub peer: crate::request::conn::Peer,
    /// The client address the connection manager took from the headers
    /// (`%DOWNSTREAM_REMOTE_ADDRESS%`; none: the peer).
    pub remote: Option<std::net::SocketAddr>,
    /// Our address on the downstream connection.
    pub local: crate::request::conn::Peer,
    /// The TLS client's SNI.
    pub server_name: Option<String>,
    /// The ClientHello's JA3 / JA4 fingerprints, when the listener's
    /// `tls_inspector` computes them.
    pub fingerprints: Option<Arc<crate::tls::fingerprint::Fingerprints>>,
    /// The downstream connection's id.
    pub connection_id: u64,
    /// How far the request body has been read.
    pub request: Arc<RequestProgress>,
    /// The request's sampled span, finished with the log lines.
    pub span: Option<Box<crate::trace::Span>>,
}

/// Holds a request's [`Pending`] while it is answered: if the request is dropped
/// first (the client went away), the line is still written, with status 0 and
/// flag `DC`, as Envoy does.
#[derive(Debug)]
pub struct Guard(pub Option<Pending>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.write(ResponseSide {
                flag: Some("DC"),
                ..ResponseSide::default()
            });
        }
    }
}

/// The response side of a log entry.
#[derive(Debug, Default)]
pub struct ResponseSide {
    /// The status sent.
    pub status: u16,
    /// The response headers sent.
    pub headers: HeaderMap,
    /// Envoy's short response flag, if courier answered itself.
    pub flag: Option<&'static str>,
    /// The upstream, if the request was forwarded.
    pub upstream: Option<Upstreamed>,
    /// The matched route's name.
    pub route_name: Option<String>,
    /// Whether the route answered with a direct response or a redirect.
    pub direct: bool,
    /// Response code details the router set.
    pub details: Option<String>,
    /// Time to the response headers.
    pub response_duration: Duration,
    /// Response body bytes sent.
    pub bytes_sent: u64,
    /// Response trailers, if any were sent.
    pub trailers: Option<HeaderMap>,
    /// The filters' dynamic metadata.
    pub dynamic_metadata: DynamicMetadata,
    /// The request was a health check.
    pub health_check: bool,
    /// `%CONNECTION_TERMINATION_DETAILS%`: why a network filter closed the
    /// connection (network RBAC's denial).
    pub termination_details: Option<String>,
}

/// Everything a line may refer to.
pub struct Entry<'a> {
    /// The request side.
    pub req: &'a Pending,
    /// The response side.
    pub resp: &'a ResponseSide,
    /// Time from start to the end of the response.
    pub duration: Duration,
    /// Request body bytes.
    pub bytes_received: u64,
    /// Time to the end of the request body, if it ended.
    pub request_duration: Option<u64>,
    /// `%LOCAL_REPLY_BODY%`: set only while a direct response's body is made.
    pub local_reply_body: Option<&'a [u8]>,
}

impl Pending {
    /// Renders and buffers the request's lines.
    pub fn write(mut self, resp: ResponseSide) {
        let span = self.span.take();
        let entry = Entry {
            req: &self,
            resp: &resp,
            duration: self.started.elapsed(),
            bytes_received: self.request.received.load(Ordering::Relaxed),
            request_duration: Some(self.request.done_ms.load(Ordering::Relaxed))
                .filter(|ms| *ms != u64::MAX),
            local_reply_body: None,
        };
        for log in self.logs.get() {
            if log.filter.as_ref().is_some_and(|f| !f.passes(&entry)) {
                continue;
            }
            match &log.sink {
                Sink::OpenTelemetry(o) => {
                    otel::record(o, &entry, span.as_deref().map(crate::trace::Span::ids));
                }
                Sink::HttpGrpc(g) => grpc_als::record(g, &entry),
                sink => writer::append(sink, |buf| render::line_into(log, &entry, buf)),
            }
        }
        if let Some(span) = span {
            span.finish(&self, &resp, entry.bytes_received);
        }
    }
}

impl courier_config::listener::log_filter::Subject for Entry<'_> {
    fn flags(&self) -> Option<&str> {
        self.resp.flag
    }

    fn health_check(&self) -> bool {
        self.resp.health_check
    }

    fn request_header(&self, name: &str) -> Option<String> {
        // Repeated headers joined with `,`, as Envoy's header filter reads them.
        let mut values = self.req.headers.get_all(name).iter();
        let first = values.next()?.to_str().ok()?;
        let mut joined = first.to_string();
        for v in values {
            joined.push(',');
            joined.push_str(v.to_str().ok()?);
        }
        Some(joined)
    }

    fn attribute(&self, root: &str) -> Option<courier_config::cel::Value> {
        attributes::root(self, root)
    }
}

/// Envoy's long name for a short response flag.
pub fn long_flag(short: &str) -> &'static str {
    match short {
        "NR" => "NoRouteFound",
        "NC" => "NoClusterFound",
        "UH" => "NoHealthyUpstream",
        "UF" => "UpstreamConnectionFailure",
        "UT" => "UpstreamRequestTimeout",
        "UO" => "UpstreamOverflow",
        "URX" => "UpstreamRetryLimitExceeded",
        "UC" => "UpstreamConnectionTermination",
        "UR" => "UpstreamRemoteReset",
        "LR" => "LocalReset",
        "DC" => "DownstreamConnectionTermination",
        "DPE" => "DownstreamProtocolError",
        "UPE" => "UpstreamProtocolError",
        "DT" => "DurationTimeout",
        "DI" => "DelayInjected",
        "FI" => "FaultInjected",
        "RL" => "RateLimited",
        "UAEX" => "UnauthorizedExternalService",
        "RLSE" => "RateLimitServiceError",
        "LH" => "FailedLocalHealthCheck",
        "UMSDR" => "UpstreamMaxStreamDurationReached",
        _ => "-",
    }
}
