//! The HTTP filter-chain interface and its driver.
//!
//! # The contract
//!
//! Build one [`FilterChain`] per HCM (and snapshot) with [`crate::build_chain`]; it is
//! `Send + Sync` and meant to be shared by every worker (the caches inside the filters are
//! lock-free). The connection manager then runs, per request, after selecting the route and
//! before the router (so also before direct responses and redirects, which Envoy's router
//! serves, and also when no route matched):
//!
//! 1. build a [`RequestState`] from the request head, the connection's
//!    [`ConnFacts`](crate::ConnFacts), the trusted client address and the selected route
//!    ([`SelectedRoute`](crate::SelectedRoute): the per-filter configs of the chosen
//!    weighted cluster, route, virtual host and route configuration, and the route's
//!    metadata); if [`FilterChain::wants_body`] says so, buffer the body first into
//!    `state.body`;
//! 2. `chain.decode_headers(&mut state, reselect).await`:
//!    - [`Verdict::Continue`]: route (again, if the chain re-selected) and forward
//!      `state.head`;
//!    - [`Verdict::Respond`]: answer with the [`LocalReply`] (through the local-reply path:
//!      `content-type: text/plain` when there is a body, HEAD without body, gRPC mapping,
//!      `details` as `%RESPONSE_CODE_DETAILS%`), without contacting the upstream;
//! 3. on the response (upstream or local), `chain.encode_response(&mut state, head)` (or
//!    `chain.encode_headers(&state, headers)` when the chain has no body filter) and add
//!    `state.response_headers`; `state.metadata` is the request's dynamic metadata for
//!    access logs;
//! 4. if `encode_response` returned encoders ([`BodyEncoders`], empty for most responses),
//!    pass every response body chunk through [`BodyEncoders::data`] and the trailers through
//!    [`BodyEncoders::trailers`] before they go downstream (Envoy's `encodeData` /
//!    `encodeTrailers`): a filter transforms the body as it streams, never buffering it.
//!
//! The body path costs nothing where no filter uses it: [`FilterChain::has_body_filters`]
//! is decided when the chain is built, and a response no filter transforms gets no
//! encoder (an empty `Vec`, no allocation), so its body is sent as before.
//!
//! Filters run in config order. Each filter returns a [`Decision`]: a filter with nothing to
//! wait for answers [`Decision::Continue`] or [`Decision::Respond`] synchronously, so it
//! allocates neither a future nor a box; only a filter that must wait on I/O (a JWKS fetch,
//! an authorization call) returns [`Decision::Pending`] with a boxed future, which the
//! driver awaits on the same task before the next filter runs (Envoy's StopIteration +
//! `continueDecoding()`). The future may hold `&mut RequestState`, so it can change headers
//! and metadata when its I/O completes. Every future is `Send` (workers `tokio::spawn`
//! connections). Dropping the request's future cancels a pending filter (Envoy's
//! `onDestroy`).
//!
//! `HttpFilter.disabled` and per-route `FilterConfig.disabled` are applied by the driver:
//! a filter disabled in the HCM runs only on routes whose per-filter config (of its name)
//! exists and is not disabled; a per-route `disabled: true` skips it. A filter receives
//! only its own per-route config, from the most specific level that has one.
//!
//! Dynamic metadata written by a filter (namespace -> object, top-level keys merged) is
//! visible to every later filter: jwt_authn's payload to RBAC's metadata matchers.
//!
//! After a filter calls [`RequestState::clear_route_cache`], the driver calls `reselect`
//! with the current head before the next filter, so later filters (and the router) see the
//! route for the headers as they are now.

use crate::request::RequestState;
use bytes::Bytes;
use courier_config::filters::PerRouteFilterConfig;
use http::request::Parts;
use http::{HeaderMap, StatusCode};
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

/// A locally generated answer (Envoy's `sendLocalReply`).
#[derive(Debug, Clone)]
pub struct LocalReply {
    /// The status.
    pub status: StatusCode,
    /// The body (`text/plain` when not empty).
    pub body: Bytes,
    /// Extra response headers (e.g. `www-authenticate`).
    pub headers: HeaderMap,
    /// `%RESPONSE_CODE_DETAILS%`, e.g. `rbac_access_denied_matched_policy[none]`.
    pub details: Cow<'static, str>,
    /// The response flag the reply sets (`RL` for a rate-limited request), if any.
    pub response_flag: Option<&'static str>,
    /// The `grpc-status` of the reply to a gRPC request, in place of the one mapped from
    /// the HTTP status (`rate_limited_as_resource_exhausted`).
    pub grpc_status: Option<u16>,
}

impl LocalReply {
    /// A reply with a static body and no extra headers.
    pub fn new(
        status: StatusCode,
        body: impl Into<Bytes>,
        details: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            status,
            body: body.into(),
            headers: HeaderMap::new(),
            details: details.into(),
            response_flag: None,
            grpc_status: None,
        }
    }
}

/// The response head as a filter's response hooks see it.
#[derive(Debug)]
pub struct ResponseHead<'h> {
    /// The status.
    pub status: StatusCode,
    /// The headers, which the filter may change.
    pub headers: &'h mut HeaderMap,
    /// The response has no body (HEAD, 204, an empty local reply): there is nothing to
    /// transform.
    pub end_stream: bool,
    /// The whole body of a local reply (known before it is sent; the gRPC-Web filter
    /// makes it the `grpc-message` of a non-gRPC reply); `None` for a body that streams
    /// from upstream.
    pub local_body: Option<Bytes>,
    /// The response is courier's own (a local reply, a direct response), not an
    /// upstream's.
    pub local: bool,
    /// Set by a filter that replaces the response with a local one (Envoy's
    /// `sendLocalReply` from `encodeHeaders`, which goes straight to the codec):
    /// the filters after it do not see the response, and the connection
    /// manager sends this instead: its status, body and, as the whole header
    /// set, its `headers` (`details`, flag and gRPC status are not used).
    pub replacement: Option<LocalReply>,
}

/// A response body transform failed (a compression library's error): the stream is reset,
/// as Envoy resets a stream whose encoder filter fails.
#[derive(Debug, thiserror::Error)]
#[error("response body filter: {0}")]
pub struct EncodeError(pub String);

/// One filter's transform of one body (Envoy's `encodeData` / `encodeTrailers`, or on the
/// request `decodeData` / `decodeTrailers`), made by [`HttpFilter::encode_response`] for
/// the responses it transforms, or by a filter's `decode_headers` for the request
/// ([`RequestState::request_encoders`]). `Sync` because the request's state, which holds
/// request encoders, is shared by reference with a suspended filter's future.
pub trait BodyEncoder: Send + Sync {
    /// Transforms a chunk; `end_stream` when it is the last one (no trailers follow).
    fn encode_data(&mut self, data: Bytes, end_stream: bool) -> Result<Bytes, EncodeError>;

    /// The trailers arrive (the body has ended without an `end_stream` chunk): the filter
    /// may change them and returns the bytes to send before them.
    fn encode_trailers(&mut self, trailers: &mut HeaderMap) -> Result<Bytes, EncodeError>;

    /// After a request encoder failed: the local reply the filter answers with instead
    /// (Envoy's `sendLocalReply` from `decodeData`, e.g. gRPC-Web's 400 for a body that is
    /// not base64). The default has none: the stream just ends.
    fn failure_reply(&self) -> Option<LocalReply> {
        None
    }

    /// Whether the response headers wait for the whole body (Envoy's `StopIteration` on
    /// them: gRPC-Web turning a non-gRPC response's body into `grpc-message`): the body
    /// is then read through the encoders and none of it is sent, and
    /// [`BodyEncoder::release_headers`] finishes the headers. The default does not wait.
    fn holds_headers(&self) -> bool {
        false
    }

    /// Finishes the held response headers once the whole body has gone through
    /// ([`BodyEncoder::holds_headers`]). The default changes nothing.
    fn release_headers(&mut self, headers: &mut HeaderMap) {
        let _ = headers;
    }
}

/// The encoders of one response, in the order its body flows through them (the chain's
/// reverse order). Empty (no allocation) when no filter transforms the body.
#[derive(Default)]
pub struct BodyEncoders(Vec<Box<dyn BodyEncoder>>);

impl BodyEncoders {
    /// Whether no filter transforms the body.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds an encoder after the others (a filter's on the request path, where encoders
    /// run in filter order).
    pub fn push(&mut self, encoder: Box<dyn BodyEncoder>) {
        self.0.push(encoder);
    }

    /// The local reply of the encoder that failed, if it has one
    /// ([`BodyEncoder::failure_reply`]).
    pub fn failure_reply(&self) -> Option<LocalReply> {
        self.0.iter().find_map(|e| e.failure_reply())
    }

    /// Whether some encoder holds the response headers until the body has been read
    /// ([`BodyEncoder::holds_headers`]).
    pub fn holds_headers(&self) -> bool {
        self.0.iter().any(|e| e.holds_headers())
    }

    /// Lets every encoder finish the held response headers.
    pub fn release_headers(&mut self, headers: &mut HeaderMap) {
        for e in &mut self.0 {
            e.release_headers(headers);
        }
    }

    /// Passes a chunk through every encoder.
    pub fn data(&mut self, mut data: Bytes, end_stream: bool) -> Result<Bytes, EncodeError> {
        for e in &mut self.0 {
            data = e.encode_data(data, end_stream)?;
        }
        Ok(data)
    }

    /// Passes the trailers through every encoder; returns the bytes to send before them.
    /// What an encoder adds at the trailers flows through the encoders after it as data,
    /// as Envoy's `addEncodedData` from `encodeTrailers` does.
    pub fn trailers(&mut self, trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        let mut out = bytes::BytesMut::new();
        for i in 0..self.0.len() {
            let mut added = self.0[i].encode_trailers(trailers)?;
            for later in &mut self.0[i + 1..] {
                added = later.encode_data(added, false)?;
            }
            out.extend_from_slice(&added);
        }
        Ok(out.freeze())
    }
}

impl std::fmt::Debug for BodyEncoders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BodyEncoders({})", self.0.len())
    }
}

/// A filter's request-body needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyWanted {
    /// Buffer at most this many bytes.
    pub max_bytes: u32,
    /// A longer body is cut at `max_bytes` (else the request is answered 413
    /// `Payload Too Large`).
    pub allow_partial: bool,
}

/// How a suspended filter finished.
#[derive(Debug)]
pub enum Verdict {
    /// Go on with the next filter.
    Continue,
    /// Stop the chain and answer locally.
    Respond(LocalReply),
}

/// A filter's suspended work: awaited by the driver on the request's task.
pub type PendingFuture<'r> = Pin<Box<dyn Future<Output = Verdict> + Send + 'r>>;

/// A filter's start-up work ([`HttpFilter::init`]).
pub type InitFuture<'f> = Pin<Box<dyn Future<Output = bool> + Send + 'f>>;

/// A filter's background work for its lifetime ([`HttpFilter::background`]).
pub type BackgroundFuture<'f> = Pin<Box<dyn Future<Output = ()> + Send + 'f>>;

/// What a filter decided about the request headers.
pub enum Decision<'r> {
    /// Go on with the next filter.
    Continue,
    /// Stop the chain and answer locally.
    Respond(LocalReply),
    /// Wait for I/O; the future's verdict decides. Only filters with something to wait for
    /// build one.
    Pending(PendingFuture<'r>),
}

impl std::fmt::Debug for Decision<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Continue => f.write_str("Continue"),
            Self::Respond(r) => f.debug_tuple("Respond").field(r).finish(),
            Self::Pending(_) => f.write_str("Pending(..)"),
        }
    }
}

/// An HTTP filter instance, built once per filter config and shared by every request (and
/// worker) using it.
pub trait HttpFilter: Send + Sync {
    /// Called with the request headers. `per_route` is this filter's per-route config on the
    /// selected route (the most specific level's), if any.
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r>;

    /// Work to do once when the chain is built (jwt_authn `async_fetch` JWKS prefetch);
    /// resolves to whether it succeeded. The default has none.
    fn init(&self) -> Option<InitFuture<'_>> {
        None
    }

    /// Work that runs as long as the filter lives, off the request path (jwt_authn
    /// `async_fetch` refreshes), one future per independent task. The default has none.
    fn background(&self) -> Vec<BackgroundFuture<'_>> {
        Vec::new()
    }

    /// Whether the filter needs the request body buffered before `decode_headers`
    /// (ext_authz `with_request_body`). The default needs none.
    fn wants_body(&self) -> Option<BodyWanted> {
        None
    }

    /// [`HttpFilter::wants_body`] on a route whose per-route config for this filter is
    /// `per_route` (ext_authz `disable_request_body_buffering`). The default ignores it.
    fn wants_body_on(&self, per_route: Option<&PerRouteFilterConfig>) -> Option<BodyWanted> {
        let _ = per_route;
        self.wants_body()
    }

    /// Called with the response headers (upstream or local reply), in reverse filter order.
    /// The default does nothing.
    fn encode_headers(&self, req: &RequestState<'_>, headers: &mut HeaderMap) {
        let _ = (req, headers);
    }

    /// Whether the filter has a response body path ([`HttpFilter::encode_response`]); fixed
    /// for the filter's life, so a chain knows when it is built whether it needs the body
    /// path at all. The default has none.
    fn encodes_body(&self) -> bool {
        false
    }

    /// Called (only when [`HttpFilter::encodes_body`]) with the response head after
    /// [`HttpFilter::encode_headers`], with this filter's per-route config; returns the
    /// transform of this response's body, if the filter changes it. The default changes
    /// nothing.
    fn encode_response(
        &self,
        req: &mut RequestState<'_>,
        per_route: Option<&PerRouteFilterConfig>,
        head: &mut ResponseHead<'_>,
    ) -> Option<Box<dyn BodyEncoder>> {
        let _ = (req, per_route, head);
        None
    }
}

/// One filter in a chain: its name (the key of per-route configs), whether the HCM disabled
/// it, and the instance.
pub struct ChainEntry {
    /// `HttpFilter.name`.
    pub name: String,
    /// `HttpFilter.disabled`: runs only where a route's per-filter config enables it.
    pub disabled: bool,
    /// The filter.
    pub filter: Box<dyn HttpFilter>,
}

impl ChainEntry {
    /// Whether the filter runs on `route` (`None`: it is off there) and, if so, its
    /// per-route config. A per-route `disabled: true` turns it off; an HCM-disabled filter
    /// runs only where a route-level entry of its name exists and is not disabled.
    fn on_route<'a>(
        &self,
        route: Option<crate::request::SelectedRoute<'a>>,
    ) -> Option<Option<&'a PerRouteFilterConfig>> {
        match route.and_then(|r| r.per_filter_config(&self.name)) {
            Some(c) if c.disabled => None,
            Some(c) => Some(c.config.as_ref()),
            None if self.disabled => None,
            None => Some(None),
        }
    }
}

impl std::fmt::Debug for ChainEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainEntry")
            .field("name", &self.name)
            .field("disabled", &self.disabled)
            .finish_non_exhaustive()
    }
}

/// The decoder filters of one HCM, in config order (the router excluded: the connection
/// manager forwards after the chain continues).
#[derive(Debug, Default)]
pub struct FilterChain {
    entries: Vec<ChainEntry>,
    /// Some filter has a response body path: decided once, so chains without one never
    /// look for encoders per response.
    body_filters: bool,
}

impl FilterChain {
    /// A chain of these filters, in this order.
    pub fn new(entries: Vec<ChainEntry>) -> Self {
        let body_filters = entries.iter().any(|e| e.filter.encodes_body());
        Self {
            entries,
            body_filters,
        }
    }

    /// Whether some filter may transform response bodies ([`FilterChain::encode_response`]).
    pub fn has_body_filters(&self) -> bool {
        self.body_filters
    }

    /// The filters.
    pub fn entries(&self) -> &[ChainEntry] {
        &self.entries
    }

    /// The filters, to combine with others.
    pub fn into_entries(self) -> Vec<ChainEntry> {
        self.entries
    }

    /// Whether the chain has no filter (the connection manager may skip building a
    /// [`RequestState`]).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the connection manager must buffer before [`FilterChain::decode_headers`]: the
    /// largest `max_bytes` any filter wants, partial only if every such filter allows it.
    /// `None` (the common case): stream the body, `RequestState::body` stays `None`.
    pub fn wants_body(&self) -> Option<BodyWanted> {
        self.entries
            .iter()
            .filter_map(|e| e.filter.wants_body())
            .reduce(|a, b| BodyWanted {
                max_bytes: a.max_bytes.max(b.max_bytes),
                allow_partial: a.allow_partial && b.allow_partial,
            })
    }

    /// [`FilterChain::wants_body`] for the filters that run on `route`, with their
    /// per-route configs: a filter disabled there buffers nothing.
    pub fn wants_body_on(
        &self,
        route: Option<crate::request::SelectedRoute<'_>>,
    ) -> Option<BodyWanted> {
        self.entries
            .iter()
            .filter_map(|e| e.filter.wants_body_on(e.on_route(route)?))
            .reduce(|a, b| BodyWanted {
                max_bytes: a.max_bytes.max(b.max_bytes),
                allow_partial: a.allow_partial && b.allow_partial,
            })
    }

    /// Runs every filter's start-up work (spawn it when the chain is built, holding the
    /// chain in an `Arc`; a listener without `fast_listener` may wait for it). Resolves to
    /// whether all of it succeeded.
    pub async fn init(&self) -> bool {
        let mut ok = true;
        for e in &self.entries {
            if let Some(f) = e.filter.init() {
                ok &= f.await;
            }
        }
        ok
    }

    /// Runs every filter's background work until all of it ends (the proxy spawns this on
    /// its main thread, holding the chain in an `Arc`, and drops it at shutdown).
    pub async fn background(&self) {
        let mut work: Vec<BackgroundFuture<'_>> = self
            .entries
            .iter()
            .flat_map(|e| e.filter.background())
            .collect();
        std::future::poll_fn(|cx| {
            work.retain_mut(|f| f.as_mut().poll(cx).is_pending());
            if work.is_empty() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
    }

    /// Runs the filters on the request headers. `reselect` selects the route again from the
    /// current head after a filter cleared the route cache.
    pub async fn decode_headers<'a, F>(
        &self,
        req: &mut RequestState<'a>,
        mut reselect: F,
    ) -> Verdict
    where
        F: FnMut(&Parts) -> Option<crate::request::SelectedRoute<'a>> + Send,
    {
        for entry in &self.entries {
            let Some(per_route) = entry.on_route(req.route) else {
                continue;
            };
            let verdict = match entry.filter.decode_headers(req, per_route) {
                Decision::Continue => Verdict::Continue,
                Decision::Respond(r) => Verdict::Respond(r),
                Decision::Pending(fut) => fut.await,
            };
            if let Verdict::Respond(r) = verdict {
                return Verdict::Respond(r);
            }
            if req.route_cache_cleared() {
                let route = reselect(&req.head);
                req.set_route(route);
            }
        }
        Verdict::Continue
    }

    /// Runs the response-path hooks of the filters enabled on the request's (final) route,
    /// last filter first.
    pub fn encode_headers(&self, req: &RequestState<'_>, headers: &mut HeaderMap) {
        for entry in self.entries.iter().rev() {
            if entry.on_route(req.route).is_some() {
                entry.filter.encode_headers(req, headers);
            }
        }
    }

    /// [`FilterChain::encode_headers`] plus the body filters' response hooks, filter by
    /// filter, last filter first; returns the encoders the response body must flow through
    /// (empty unless a body filter transforms this response).
    pub fn encode_response(
        &self,
        req: &mut RequestState<'_>,
        head: &mut ResponseHead<'_>,
    ) -> BodyEncoders {
        if !self.body_filters {
            self.encode_headers(req, head.headers);
            return BodyEncoders::default();
        }
        let mut encoders = BodyEncoders::default();
        for entry in self.entries.iter().rev() {
            let Some(per_route) = entry.on_route(req.route) else {
                continue;
            };
            entry.filter.encode_headers(req, head.headers);
            if entry.filter.encodes_body()
                && let Some(e) = entry.filter.encode_response(req, per_route, head)
            {
                encoders.0.push(e);
            }
            if head.replacement.is_some() {
                // The replacement is sent as it is: no other filter sees it.
                return BodyEncoders::default();
            }
        }
        encoders
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;
