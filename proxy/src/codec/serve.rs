//! Serving one downstream connection once its filter chain is known: hyper's
//! HTTP/1.1 and HTTP/2 codecs configured from the connection manager, the
//! codec-error and flood wrappers on the socket, and the connection's end
//! (drain, idle timeout, `max_connection_duration`).

use crate::codec::Codec;
use crate::codec::ends::{self, End, Ends, Fired};
use crate::codec::error::CodecErrors;
use crate::codec::h1_check::{H1Check, Rules};
use crate::codec::idle::{Activity, Tracked};
use crate::codec::park::Parkable;
use crate::conn_manager;
use crate::conn_manager::limits::ResetStream;
use crate::request::conn::ConnInfo;
use crate::request::phase::Phase;
use crate::request::snapshot::WorkerSnapshot;
use crate::router::Upstream;
use crate::stats::{HcmStats, WorkerStats};
use crate::upstream::ClusterManager;
use bytes::Bytes;
use courier_config::listener::hcm::HttpConnectionManager;
use courier_config::listener::http_options::H2FloodLimits;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// The connection manager's limits and timeouts that hyper enforces, per connection.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    max_headers_bytes: usize,
    max_headers_count: usize,
    pub(crate) idle_timeout: Option<Duration>,
    request_headers_timeout: Option<Duration>,
    stream_idle_timeout: Option<Duration>,
    h2_max_streams: u32,
    h2_stream_window: u32,
    h2_connection_window: u32,
    h2_flood: H2FloodLimits,
    /// The `server` header of the codec's own replies (shared: cloning it
    /// does not allocate per connection).
    server_name: Bytes,
    /// What becomes of every response's `server` header; none without a
    /// connection manager, as the connection manager sets it.
    server_header: Option<crate::request::headers::ServerHeader>,
    max_connection_duration: Option<Duration>,
    max_stream_duration: Option<Duration>,
    pub(crate) drain_timeout: Duration,
    /// `http1_safe_max_connection_duration`.
    pub(crate) http1_safe_lifetime: bool,
    half_close: bool,
    /// The listener's `bypass_overload_manager`.
    bypass_overload: bool,
    /// `http_protocol_options.accept_http_10`.
    accept_http_10: bool,
    /// `http_protocol_options.enable_trailers`: HTTP/1.1 responses carry trailers.
    h1_trailers: bool,
    /// `http_protocol_options.header_key_format` is `preserve_case`: hyper
    /// records the case of request header names.
    preserve_case: bool,
}

/// hyper's smallest HTTP/1.1 read buffer.
const MIN_H1_BUFFER: usize = 8192;

impl Limits {
    pub(crate) fn of(hcm: Option<&HttpConnectionManager>) -> Self {
        let Some(h) = hcm else {
            // No connection manager (the chain vanished): Envoy's defaults.
            use courier_config::listener::http_options::{CommonHttpOptions, Http2Options};
            let (common, h2) = (CommonHttpOptions::default(), Http2Options::default());
            return Limits {
                max_headers_bytes: courier_config::listener::hcm::DEFAULT_MAX_REQUEST_HEADERS_KB
                    as usize
                    * 1024,
                max_headers_count: common.max_headers_count as usize,
                idle_timeout: common.idle_timeout,
                request_headers_timeout: None,
                stream_idle_timeout: Some(
                    courier_config::listener::hcm::DEFAULT_STREAM_IDLE_TIMEOUT,
                ),
                h2_max_streams: h2.max_concurrent_streams,
                h2_stream_window: h2.initial_stream_window_size,
                h2_connection_window: h2.initial_connection_window_size,
                h2_flood: h2.flood,
                server_name: Bytes::from_static(b"envoy"),
                server_header: None,
                max_connection_duration: None,
                max_stream_duration: None,
                half_close: false,
                drain_timeout: courier_config::listener::hcm::DEFAULT_DRAIN_TIMEOUT,
                http1_safe_lifetime: false,
                bypass_overload: false,
                accept_http_10: false,
                h1_trailers: false,
                preserve_case: false,
            };
        };
        use crate::request::headers::ServerHeader;
        use courier_config::listener::hcm::ServerHeaderTransformation as T;
        let server_name = Bytes::from(h.server_name.clone());
        let value = http::HeaderValue::from_maybe_shared(server_name.clone()).ok();
        let server_header = match (h.server_header_transformation, value) {
            (T::PassThrough, _) => Some(ServerHeader::PassThrough),
            (T::Overwrite, Some(v)) => Some(ServerHeader::Overwrite(v)),
            (T::AppendIfAbsent, Some(v)) => Some(ServerHeader::AppendIfAbsent(v)),
            (_, None) => None,
        };
        Limits {
            server_header,
            // The codec's own replies carry the server name unless the
            // upstream's header passes through, when they have none (they are
            // local replies: Envoy's PASS_THROUGH adds no header to them).
            server_name: if h.server_header_transformation == T::PassThrough {
                Bytes::new()
            } else {
                server_name
            },
            max_headers_bytes: h.max_request_headers_kb as usize * 1024,
            max_headers_count: h.common_http_protocol_options.max_headers_count as usize,
            idle_timeout: h.common_http_protocol_options.idle_timeout,
            request_headers_timeout: h.request_headers_timeout,
            stream_idle_timeout: h.stream_idle_timeout,
            h2_max_streams: h.http2_protocol_options.max_concurrent_streams,
            h2_stream_window: h.http2_protocol_options.initial_stream_window_size,
            h2_connection_window: h.http2_protocol_options.initial_connection_window_size,
            h2_flood: h.http2_protocol_options.flood,
            max_connection_duration: h.common_http_protocol_options.max_connection_duration,
            max_stream_duration: h.common_http_protocol_options.max_stream_duration,
            half_close: false,
            drain_timeout: h.drain_timeout,
            http1_safe_lifetime: h.http1_safe_max_connection_duration,
            bypass_overload: h.bypass_overload_manager,
            accept_http_10: h.http_protocol_options.accept_http_10,
            h1_trailers: h.http_protocol_options.enable_trailers,
            preserve_case: matches!(
                h.http_protocol_options.header_case,
                courier_config::listener::http_options::HeaderCase::Preserve { .. }
            ),
        }
    }

    /// The head (request line and headers) must fit hyper's read buffer: room
    /// for the limit plus the request line; the exact limit is the connection
    /// manager's (hyper's buffer cannot be smaller than 8 KiB).
    fn h1_buffer(&self) -> usize {
        (self.max_headers_bytes + MIN_H1_BUFFER).max(MIN_H1_BUFFER)
    }

    /// Envoy resets an HTTP/2 stream over the limit, as the connection manager
    /// does; h2 itself answers 431 past its list size, so that is set well
    /// above the limit (still bounding what a peer can make us hold).
    fn h2_header_list(&self) -> u32 {
        u32::try_from(self.max_headers_bytes * 2 + 16 * 1024).unwrap_or(u32::MAX)
    }

    /// hyper parses at most 100 headers (Envoy's default count too) on the
    /// stack; a configured count makes it allocate and fill that many slots per
    /// request (a third of the throughput of a direct response), so it is set
    /// only above 100. Below, the connection manager enforces the count.
    fn hyper_max_headers(&self) -> Option<usize> {
        (self.max_headers_count > 100).then_some(self.max_headers_count)
    }

    pub(crate) fn h1(&self, b: &mut hyper::server::conn::http1::Builder) {
        b.max_buf_size(self.h1_buffer())
            .timer(TokioTimer::new())
            // hyper's default is 30 s once a timer is set; Envoy's is none, and
            // the socket wrapper keeps `request_headers_timeout` Envoy's way.
            .header_read_timeout(None);
        if let Some(n) = self.hyper_max_headers() {
            b.max_headers(n);
        }
        if self.half_close {
            b.half_close(true);
        }
        if self.preserve_case {
            b.preserve_header_case(true);
        }
    }

    /// Answers what was read before the client closed its side (the fuzz
    /// harness's in-memory client sends everything, then closes).
    pub(crate) fn with_half_close(mut self) -> Self {
        self.half_close = true;
        self
    }

    fn h2(&self, b: &mut hyper::server::conn::http2::Builder<TokioExecutor>) {
        b.max_header_list_size(self.h2_header_list())
            .max_concurrent_streams(self.h2_max_streams)
            .initial_stream_window_size(self.h2_stream_window)
            .initial_connection_window_size(self.h2_connection_window)
            .timer(TokioTimer::new());
    }
}

/// What tells a connection its listener version is retired (LDS update or
/// removal), and how long it then gets.
#[derive(Clone)]
pub(crate) struct ListenerDrain {
    /// Turns true when the version is retired.
    pub signal: watch::Receiver<bool>,
    /// The server's `--drain-time-s`.
    pub drain_time: Duration,
}

/// Whether a response of an HTTP/1 stream closes its connection:
/// `disable_http_keepalive`, or the connection is draining (`max_connection_duration`,
/// or its listener version retired).
///
/// `retired` is read here as well as by the codec's drain wait: the codec
/// polls that wait after hyper has read the next request, so a request that
/// arrives together with the retirement would otherwise be answered
/// keep-alive. `has_changed` is one atomic load (the signal only ever turns true).
fn keepalive_off(h1: bool, activity: &Activity, retired: Option<&watch::Receiver<bool>>) -> bool {
    h1 && (activity.overload().keepalive_disabled()
        || activity.draining()
        || retired.is_some_and(|r| r.has_changed().unwrap_or(false)))
}

/// What a connection's requests share, in one allocation per connection.
struct PerRequest {
    info: Arc<ConnInfo>,
    stats: Arc<HcmStats>,
    worker_stats: Arc<WorkerStats>,
    clusters: Arc<ClusterManager>,
    activity: Arc<Activity>,
    snapshot: Arc<WorkerSnapshot>,
    /// The `server` response header, if the chain sets one.
    server: Option<crate::request::headers::ServerHeader>,
    /// The listener version's drain signal, as it was when the connection
    /// was accepted (see [`keepalive_off`]).
    retired: Option<watch::Receiver<bool>>,
}

/// What serving a connection needs besides its socket.
pub(crate) struct Conn {
    /// The connection's facts and filter chain.
    pub info: Arc<ConnInfo>,
    /// HTTP/1.1, HTTP/2 or detected.
    pub codec: Codec,
    /// The connection manager's limits (shared by the filter chain's connections).
    pub limits: Arc<Limits>,
    /// The config in force, through the worker's own handle.
    pub snapshot: Arc<WorkerSnapshot>,
    /// The worker's stats.
    pub worker_stats: Arc<WorkerStats>,
    /// The connection manager's stats.
    pub hcm_stats: Arc<HcmStats>,
    /// The listener version's drain signal (none in harnesses).
    pub listener_drain: Option<ListenerDrain>,
    /// The upstream clusters.
    pub clusters: Arc<ClusterManager>,
    /// The server's phase.
    pub shutdown: watch::Receiver<Phase>,
}

/// Serves HTTP on `stream` until the connection ends.
///
/// The future is a few pointers: the connection's state is in the box that
/// serves HTTP/1.1 (and parks it, see `serve_h1`), then in HTTP/2's if the
/// connection turns out to speak it.
pub(crate) fn serve<S>(stream: S, conn: Conn) -> impl Future<Output = ()> + Send + Unpin
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Conn {
        info,
        codec,
        limits,
        snapshot,
        worker_stats,
        hcm_stats: stats,
        listener_drain,
        clusters,
        shutdown,
    } = conn;
    let activity = Activity::new();
    if limits.bypass_overload {
        activity.bypass_overload();
    }
    stats.cx_total.inc();
    stats.cx_active.inc();
    let service = {
        // One reference per request for all of these, not one each.
        let shared = Arc::new(PerRequest {
            info,
            stats: Arc::clone(&stats),
            worker_stats,
            clusters,
            activity: Arc::clone(&activity),
            snapshot,
            server: limits.server_header.clone(),
            retired: listener_drain.as_ref().map(|d| d.signal.clone()),
        });
        let stream_idle = limits.stream_idle_timeout;
        let max_stream = limits.max_stream_duration;
        let h1_trailers = limits.h1_trailers;
        service_fn(move |req| {
            if let Some(wire) = &shared.info.wire {
                wire.saw(req.version());
            }
            let h1 = req.version() != http::Version::HTTP_2;
            // HTTP/1.0 closes after the response (hyper does), and Envoy says so.
            let http10_close = req.version() == http::Version::HTTP_10
                && !req
                    .headers()
                    .get(http::header::CONNECTION)
                    .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"keep-alive"));
            let stream = shared.activity.stream();
            let started = tokio::time::Instant::now();
            let snapshot = shared.snapshot.load();
            let shared = Arc::clone(&shared);
            async move {
                let up = Upstream {
                    clusters: &shared.clusters,
                    stats: &shared.worker_stats,
                };
                // Boxed: hyper spawns an HTTP/2 stream's service future as a
                // task (and keeps an HTTP/1.1 connection's in a slot), moving
                // it whole each time; a box keeps those moves to a pointer.
                let (mut resp, progress) = Box::pin(conn_manager::handle(
                    req,
                    &snapshot,
                    &shared.info,
                    &shared.stats,
                    &up,
                    shared.server.as_ref(),
                ))
                .await;
                // An HTTP/2 stream the connection manager refuses is reset:
                // hyper resets the stream of a service error.
                if resp.extensions().get::<ResetStream>().is_some() {
                    return Err(ResetStream);
                }
                // HTTP/2's HPACK table keeps the values it indexes: not as
                // slices of an upstream connection's read buffer.
                if !h1 {
                    crate::request::headers::compact(resp.headers_mut());
                }
                // hyper closes an HTTP/1.1 connection after a response saying so.
                if http10_close || keepalive_off(h1, &shared.activity, shared.retired.as_ref()) {
                    resp.headers_mut().insert(
                        http::header::CONNECTION,
                        http::HeaderValue::from_static("close"),
                    );
                }
                // `max_stream_duration` goes on while the response body streams.
                let max_stream = progress
                    .as_ref()
                    .map_or(max_stream, |p| p.max_stream_duration(max_stream));
                let deadline = max_stream.map(|t| (started + t, Arc::clone(&shared.stats)));
                Ok(resp.map(|b| {
                    let timed = (started, Arc::clone(&shared.stats));
                    let body = Tracked::new(b, stream, stream_idle, progress, deadline, timed);
                    if h1 && !h1_trailers {
                        body.without_trailers()
                    } else {
                        body
                    }
                }))
            }
        })
    };
    let io = Parkable::new(
        CodecErrors::new(
            crate::codec::h2_flood::FloodGuard::with_limits(stream, &limits.h2_flood),
            limits.server_name.clone(),
            &activity,
            limits.request_headers_timeout,
            // HTTP/2 has no heads to check; AUTO finds its preface unchecked.
            (!matches!(codec, Codec::Http2))
                .then(|| H1Check::new(Rules::new(limits.accept_http_10), limits.h1_buffer())),
        ),
        Arc::clone(&activity),
    );
    let lifetime = limits
        .max_connection_duration
        .map(|t| tokio::time::Instant::now() + t);
    let h1 = crate::codec::h1::H1 {
        limits,
        activity,
        stats: Arc::clone(&stats),
        shutdown,
        listener_drain,
        lifetime,
        auto: matches!(codec, Codec::Auto),
        http2: matches!(codec, Codec::Http2),
    };
    // HTTP/1.1 (and `AUTO`, which starts as HTTP/1.1 until the HTTP/2
    // preface shows) parks when idle: see `serve_h1`. Its future holds the
    // connection's state, boxed here: the task's own future (this one) is a
    // few pointers, and HTTP/2's box (see `http2_after`) comes once the
    // HTTP/1.1 one is gone.
    Serving {
        h1: Some(Box::pin(crate::codec::h1::serve(io, service, h1))),
        h2: None,
        stats,
        started: tokio::time::Instant::now(),
    }
}

/// A connection being served: HTTP/1.1's box (which parks), then HTTP/2's if
/// the connection speaks it. A few pointers, and `Unpin`: the task holds it
/// inline, in place of the (boxed) accept state.
struct Serving<F> {
    h1: Option<Pin<Box<F>>>,
    h2: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    stats: Arc<HcmStats>,
    /// The connection's start, for `downstream_cx_length_ms`.
    started: tokio::time::Instant,
}

impl<F, S, Svc, B> Future for Serving<F>
where
    F: Future<Output = crate::codec::h1::Served<S, Svc>>,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::HttpService<hyper::body::Incoming, ResBody = B> + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let this = self.get_mut();
        if let Some(h1) = this.h1.as_mut() {
            let served = std::task::ready!(h1.as_mut().poll(cx));
            // The HTTP/1.1 box goes before HTTP/2's comes.
            this.h1 = None;
            this.h2 =
                http2_after(served).map(|h2| -> Pin<Box<dyn Future<Output = ()> + Send>> { h2 });
        }
        if let Some(h2) = this.h2.as_mut() {
            std::task::ready!(h2.as_mut().poll(cx));
            this.h2 = None;
        }
        this.stats.cx_active.dec();
        this.stats
            .cx_length_ms
            .record(this.started.elapsed().as_millis() as u64);
        std::task::Poll::Ready(())
    }
}

/// The HTTP/2 serving future, boxed, if the connection is HTTP/2.
fn http2_after<S, Svc, B>(
    served: crate::codec::h1::Served<S, Svc>,
) -> Option<Pin<Box<impl Future<Output = ()> + Send + use<S, Svc, B>>>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::HttpService<hyper::body::Incoming, ResBody = B> + Send,
    Svc::Future: Send + 'static,
    Svc::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match served {
        // Boxed, with hyper's connection inline: one allocation.
        crate::codec::h1::Served::Http2(io, service, h) => Some(Box::pin(serve_h2(io, service, h))),
        crate::codec::h1::Served::Done => None,
    }
}

/// Serves HTTP/2 on `io` (its preface possibly waiting in the replay buffer).
async fn serve_h2<S, Svc, B>(io: Parkable<S>, service: Svc, h: crate::codec::h1::H1)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    Svc::Future: Send + 'static,
    Svc::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut h = h;
    // By reference: an `async fn`'s arguments stay in its future beside what
    // they are moved to.
    let crate::codec::h1::H1 {
        limits,
        activity,
        stats,
        shutdown,
        listener_drain,
        lifetime,
        ..
    } = &mut h;
    let (limits, activity, stats): (&Limits, &Activity, &HcmStats) = (limits, activity, stats);
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    limits.h2(&mut builder);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    // The same ends as HTTP/1.1's (crate::codec::ends), fresh: nothing has
    // fired before a connection speaks HTTP/2.
    let mut fired = Fired::default();
    let drain = ends::drained(shutdown);
    let idle = ends::idle(limits, activity);
    let lifetime = ends::lifetime(*lifetime);
    let retired = ends::retired(listener_drain);
    tokio::pin!(drain, idle, lifetime, retired);
    let events = ends::Events {
        drain,
        idle,
        lifetime,
        retired,
    };
    let drain_timeout = limits.drain_timeout;
    let mut ends = Ends::new(
        events,
        &mut fired,
        activity,
        stats,
        drain_timeout,
        true,
        false,
    );
    // The ends are polled only when they woke, not on each of the codec's
    // wakes per request.
    let mut gate = crate::codec::wake_gate::WakeGate::default();
    loop {
        let end = std::future::poll_fn(|cx| gate.poll(cx, |cx| ends.poll_end(cx)));
        tokio::select! {
            biased;
            _ = conn.as_mut() => return,
            end = end => match end {
                // GOAWAY; the streams in flight finish.
                End::Drain | End::GoAway | End::Deadline(true) => conn.as_mut().graceful_shutdown(),
                // A retired listener's drain time is up: closed.
                End::Deadline(false) => return,
            },
        }
    }
}
