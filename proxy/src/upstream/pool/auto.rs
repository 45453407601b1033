//! The pool's part of a cluster's `auto_config` (ALPN picks HTTP/2 or HTTP/1.1 per
//! connection, as Envoy's mixed pool) and `upstream_http_protocol_options`
//! (`auto_sni`, `auto_san_validation`, `override_auto_sni_header`: each request's
//! host names the TLS connection it opens, and connections of different names are
//! pooled apart, as Envoy keys its pools by the transport socket options).
//!
//! Kept apart from the pool's request paths: they call in here at three points
//! (the dispatch, the HTTP/1.1 path's new connection, the TLS handshake).

use super::{Failed, Key, Lease, POOLS, PoolConn, StreamGuard, UpstreamBody, from_hyper};
use crate::stats::ClusterStats;
use crate::upstream::UpstreamCluster;
use crate::upstream::host::{ActiveRequest, Host};
use crate::upstream::stream::UpstreamStream;
use crate::upstream::tls::AutoName;
use courier_config::cluster::UpstreamProtocol;
use http::{Request, Response, header};
use hyper::body::Incoming;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering;

tokio::task_local! {
    /// The name a request being sent gives the TLS connection it may open.
    static NAME: AutoName;
}

/// Names a worker has given pool keys; cleared (ids are never reused) once this
/// many, so hosts sent by clients cannot grow it without bound.
const MAX_NAMES: usize = 1024;

thread_local! {
    static IDS: RefCell<(FxHashMap<AutoName, u64>, u64)> = RefCell::new((FxHashMap::default(), 0));
}

/// The pool-key id of `name` on this worker (never 0).
fn name_id(name: &AutoName) -> u64 {
    IDS.with(|ids| {
        let (map, last) = &mut *ids.borrow_mut();
        if let Some(&id) = map.get(name) {
            return id;
        }
        if map.len() >= MAX_NAMES {
            map.clear();
        }
        *last += 1;
        map.insert(name.clone(), *last);
        *last
    })
}

/// What `req` sets on a new TLS connection of `cluster` to `host` (none when
/// the host's socket is plaintext), as Envoy's router: the
/// request's host (after the route's host rewrite; the upstream request's
/// authority), or the value of `override_auto_sni_header` when present and not
/// empty (all its values joined with `,`), without the port. An IP address is
/// not sent as SNI but is still the SAN required.
pub(super) fn request_name(
    cluster: &UpstreamCluster,
    host: &Host,
    req: &Request<UpstreamBody>,
) -> Option<AutoName> {
    let auto = &cluster.config.http.auto_sni;
    if !auto.any() || cluster.tls_for(host).is_none() {
        return None;
    }
    let host = || {
        req.uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| Some(req.headers().get(header::HOST)?.to_str().ok()?.to_string()))
    };
    let overridden = auto.header.as_deref().and_then(|h| match h {
        ":authority" => None,
        h => {
            let values: Vec<&str> = req
                .headers()
                .get_all(h)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            let joined = values.join(",");
            (!joined.is_empty()).then_some(joined)
        }
    });
    let authority = overridden.or_else(host)?;
    let (name, is_ip) = host_of(&authority);
    if name.is_empty() {
        return None;
    }
    let sni = auto.sni && !is_ip;
    if !sni && !auto.san_validation {
        return None;
    }
    Some(AutoName {
        name: Arc::from(name),
        sni,
        san: auto.san_validation,
    })
}

/// The host of an authority without its port, and whether it is an IP address
/// (Envoy's `parseAuthority`).
fn host_of(authority: &str) -> (&str, bool) {
    if let Some(rest) = authority.strip_prefix('[') {
        // [v6] or [v6]:port
        let v6 = rest.split(']').next().unwrap_or(rest);
        return (v6, v6.parse::<std::net::Ipv6Addr>().is_ok());
    }
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    (host, host.parse::<std::net::IpAddr>().is_ok())
}

/// Sends `req`, whose TLS name is `name`, over the pool of that name; the name
/// is what [`current`] gives the connect on the way.
pub(super) async fn send_named(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    req: Request<UpstreamBody>,
    stats: &ClusterStats,
    high: bool,
    active: ActiveRequest,
    name: AutoName,
) -> Result<(Response<Incoming>, Lease), Failed> {
    let downstream = super::downstream_of(cluster, host, &req);
    let key = (
        cluster.index,
        host.address,
        high,
        name_id(&name),
        host.socket,
        super::Downstream::pool_id(downstream.as_ref()),
    );
    NAME.scope(name, async move {
        match cluster.config.http.protocol {
            UpstreamProtocol::Http2 => super::send_h2(cluster, host, key, req, stats, active).await,
            UpstreamProtocol::Auto => send(cluster, host, key, req, stats, active).await,
            // serve_check refuses USE_DOWNSTREAM.
            _ => {
                let mut req = req;
                super::chunk_unknown_length(&mut req);
                super::send_h1(cluster, host, key, req, stats, active).await
            }
        }
    })
    .await
}

/// The TLS name of the request being sent on this task, if its cluster takes one.
pub(super) fn current() -> Option<AutoName> {
    NAME.try_with(AutoName::clone).ok()
}

/// `auto_config`: over a pooled HTTP/2 connection when this pool's connections
/// speak HTTP/2 (the server chose it by ALPN), else as HTTP/1.1, whose new
/// connection turns to HTTP/2 when the server picks it ([`adopt_h2`]).
pub(super) async fn send(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    mut req: Request<UpstreamBody>,
    stats: &ClusterStats,
    active: ActiveRequest,
) -> Result<(Response<Incoming>, Lease), Failed> {
    if speaks_h2_already(key) {
        return super::send_h2(cluster, host, key, to_h2(req), stats, active).await;
    }
    super::chunk_unknown_length(&mut req);
    super::send_h1(cluster, host, key, req, stats, active).await
}

/// Whether the pool for `key` has an open HTTP/2 connection.
fn speaks_h2_already(key: Key) -> bool {
    POOLS.with(|p| {
        p.borrow_mut().get_mut(&key).is_some_and(|pool| {
            pool.h2.retain(|c| !c.send.is_closed());
            !pool.h2.is_empty()
        })
    })
}

/// Whether a new connection of `cluster` is to speak HTTP/2: `auto_config`, and
/// the server chose "h2" by ALPN.
pub(super) fn speaks_h2(cluster: &UpstreamCluster, stream: &UpstreamStream) -> bool {
    cluster.config.http.protocol == UpstreamProtocol::Auto
        && match stream {
            UpstreamStream::Tls(s) => s.get_ref().1.alpn_protocol() == Some(b"h2"),
            UpstreamStream::Plain(_) | UpstreamStream::Unix(_) => false,
        }
}

/// A request in HTTP/1.1 form (origin-form URI, `host`) in HTTP/2 form.
fn to_h2(req: Request<UpstreamBody>) -> Request<UpstreamBody> {
    let (mut parts, mut body) = req.into_parts();
    // Set for HTTP/1.1 by `send_h1`; HTTP/2 carries trailers.
    body.keep_trailers(true);
    if parts.uri.authority().is_none() {
        let authority = parts
            .headers
            .get(header::HOST)
            .and_then(|h| http::uri::Authority::try_from(h.as_bytes()).ok());
        let mut uri = http::uri::Parts::default();
        // auto_config runs over TLS only.
        uri.scheme = Some(http::uri::Scheme::HTTPS);
        uri.authority = authority;
        uri.path_and_query = parts.uri.path_and_query().cloned();
        if let Ok(u) = http::Uri::from_parts(uri) {
            parts.uri = u;
        }
    }
    parts.version = http::Version::HTTP_2;
    parts.headers.remove(header::HOST);
    // Added for HTTP/1.1 framing (`chunk_unknown_length`); HTTP/2 frames itself.
    parts.headers.remove(header::TRANSFER_ENCODING);
    Request::from_parts(parts, body)
}

/// A new `auto_config` connection on which the server chose HTTP/2: it joins the
/// pool as an HTTP/2 connection and carries `req` (in HTTP/1.1 form) as its
/// first stream. `conn`: the connection's `max_connections` slot and pool
/// membership; `lease`: the request's, without a connection.
pub(super) async fn adopt_h2(
    cluster: &UpstreamCluster,
    host: &Arc<Host>,
    key: Key,
    (slot, member): (crate::upstream::circuit::Held, PoolConn),
    stream: UpstreamStream,
    req: Request<UpstreamBody>,
    mut lease: Lease,
) -> Result<(Response<Incoming>, Lease), Failed> {
    let (mut send, streams) = super::h2_join(cluster, host, key, (slot, member), stream)
        .await
        .map_err(|e| (from_hyper(&e), None))?;
    let mut req = to_h2(req);
    crate::request::headers::compact(req.headers_mut());
    streams.open.fetch_add(1, Ordering::Relaxed);
    let guard = StreamGuard(streams);
    match send.send_request(req).await {
        Ok(resp) => {
            lease._stream = Some(guard);
            Ok((resp, lease))
        }
        Err(e) => Err((from_hyper(&e), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_of_strips_the_port_and_knows_ips() {
        assert_eq!(host_of("example.com:8443"), ("example.com", false));
        assert_eq!(host_of("example.com"), ("example.com", false));
        assert_eq!(host_of("10.0.0.1:80"), ("10.0.0.1", true));
        assert_eq!(host_of("[::1]:443"), ("::1", true));
        assert_eq!(host_of("::1"), ("::1", true));
    }
}
