//! What a filter sees of one request: its head, the connection it came on, the route it
//! matched and the request-scoped dynamic metadata.

use courier_config::core::MetadataMap;
use courier_config::filters::PerRouteConfig;
use courier_config::filters::rate_limit_actions::RateLimitPolicy;
use courier_config::route::PerFilterConfigs;
use http::HeaderMap;
use http::request::Parts;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

/// Facts about the downstream connection, fixed for its lifetime. The connection manager
/// builds one per connection and lends it to every request on it.
#[derive(Debug, Clone)]
pub struct ConnFacts {
    /// The socket peer (RBAC `direct_remote_ip`).
    pub peer: SocketAddr,
    /// The connection's source after PROXY protocol (RBAC `source_ip`); the socket peer
    /// when PROXY protocol is not in use.
    pub source: SocketAddr,
    /// Our address on the connection (RBAC `destination_ip` / `destination_port`).
    pub local: SocketAddr,
    /// TLS facts; `None` for a plaintext connection.
    pub tls: Option<TlsFacts>,
    /// The worker serving the connection: which copy of a filter's
    /// [`crate::per_worker::PerWorker`] counters its requests count in.
    pub worker: usize,
}

/// What the TLS handshake established.
#[derive(Debug, Clone, Default)]
pub struct TlsFacts {
    /// The SNI the client sent, if any.
    pub sni: Option<String>,
    /// The client certificate, if the client presented one.
    pub peer_cert: Option<PeerCert>,
}

/// The identity fields of a client certificate that filters match on.
#[derive(Debug, Clone, Default)]
pub struct PeerCert {
    /// URI SANs, in certificate order.
    pub uri_sans: Vec<String>,
    /// DNS SANs, in certificate order.
    pub dns_sans: Vec<String>,
    /// The subject as an RFC 2253 string (Envoy's `subjectPeerCertificate`).
    pub subject: String,
}

/// The route a request matched, as far as filters care: the per-filter configs of every
/// level and the route's metadata.
#[derive(Debug, Clone, Copy, Default)]
pub struct SelectedRoute<'a> {
    /// `typed_per_filter_config` of the levels, most specific first: the chosen weighted
    /// cluster, the route, the virtual host, the route configuration. Absent levels are
    /// `None`.
    pub per_filter: [Option<&'a PerFilterConfigs>; 4],
    /// The route's `metadata` (RBAC `sourced_metadata` with source ROUTE).
    pub metadata: Option<&'a MetadataMap>,
    /// The route's target cluster: the named one or the weighted pick; `None` for
    /// `cluster_header`, redirects and direct responses (ext_authz counts under
    /// `cluster.<name>.ext_authz.*`).
    pub cluster: Option<&'a str>,
    /// The route's `rate_limits`.
    pub rate_limits: &'a [RateLimitPolicy],
    /// The virtual host's `rate_limits`.
    pub vh_rate_limits: &'a [RateLimitPolicy],
    /// The route's `include_vh_rate_limits`.
    pub include_vh_rate_limits: bool,
}

impl<'a> SelectedRoute<'a> {
    /// The per-route config for filter `name`; the most specific level that has one wins
    /// (Envoy's `mostSpecificPerFilterConfig`).
    pub fn per_filter_config(&self, name: &str) -> Option<&'a PerRouteConfig> {
        self.per_filter.iter().flatten().find_map(|m| m.get(name))
    }
}

/// One request as it flows through the filter chain. The connection manager builds it from
/// the request head, runs the chain, then takes `head` back to route and forward.
#[derive(Debug)]
pub struct RequestState<'a> {
    /// The request head. Filters may change headers (and the path); a filter that changes
    /// what routing depends on calls [`RequestState::clear_route_cache`].
    pub head: Parts,
    /// The connection the request came on.
    pub conn: &'a ConnFacts,
    /// The trusted client address (the XFF rules of the connection manager, envoy-reference
    /// 1.6): RBAC `remote_ip`.
    pub remote: IpAddr,
    /// The matched route, `None` when no route matched (filters still run; the router then
    /// answers 404). Replaced by the chain driver after a filter clears the route cache.
    pub route: Option<SelectedRoute<'a>>,
    /// Request-scoped dynamic metadata: namespace -> object. Written by earlier filters
    /// (jwt_authn, rbac), read by later ones and by access logs.
    pub metadata: MetadataMap,
    /// The buffered request body, when a filter asked for it ([`crate::FilterChain::wants_body`]);
    /// the connection manager then forwards these bytes instead of the stream.
    pub body: Option<bytes::Bytes>,
    /// Headers the connection manager adds to the response (whether it comes from upstream
    /// or is a local reply), e.g. ext_authz `response_headers_to_add`.
    pub response_headers: HeaderMap,
    /// Typed state a filter keeps for its own response hook ([`crate::HttpFilter::encode_headers`]),
    /// e.g. ext_authz's response header actions. Empty costs nothing.
    pub filter_state: http::Extensions,
    /// The request has no body (set by the connection manager before the chain runs):
    /// there is nothing for a request body encoder to do.
    pub end_stream: bool,
    /// The encoders the request body must flow through on its way upstream, in filter
    /// order (a compressor's request direction); empty, without allocation, for most
    /// requests. The connection manager wraps the body in them after the chain.
    pub request_encoders: crate::chain::BodyEncoders,
    clear_route_cache: bool,
}

impl<'a> RequestState<'a> {
    /// A request about to enter the chain.
    pub fn new(
        head: Parts,
        conn: &'a ConnFacts,
        remote: IpAddr,
        route: Option<SelectedRoute<'a>>,
    ) -> Self {
        Self {
            head,
            conn,
            remote,
            route,
            metadata: MetadataMap::new(),
            body: None,
            response_headers: HeaderMap::new(),
            filter_state: http::Extensions::new(),
            end_stream: false,
            request_encoders: crate::chain::BodyEncoders::default(),
            clear_route_cache: false,
        }
    }

    /// Asks for the route to be selected again from the current headers before the next
    /// filter runs (and before the router). Used by filters that add or change headers
    /// routes match on (jwt_authn `clear_route_cache`).
    pub fn clear_route_cache(&mut self) {
        self.clear_route_cache = true;
    }

    /// Whether a filter cleared the route cache and the route was not selected again yet.
    pub fn route_cache_cleared(&self) -> bool {
        self.clear_route_cache
    }

    /// Installs a re-selected route and resets the cleared flag.
    pub fn set_route(&mut self, route: Option<SelectedRoute<'a>>) {
        self.route = route;
        self.clear_route_cache = false;
    }

    /// `:path` with its query (`/` when the request target has none).
    pub fn path(&self) -> &str {
        self.head.uri.path_and_query().map_or("/", |pq| pq.as_str())
    }

    /// `:authority`: the URI's authority (HTTP/2, absolute form) or the `host` header.
    pub fn authority(&self) -> &str {
        self.head
            .uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| {
                self.head
                    .headers
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
            })
            .unwrap_or("")
    }

    /// `:scheme`: the URI's scheme, else `https` on a TLS connection and `http` otherwise.
    pub fn scheme(&self) -> &str {
        self.head
            .uri
            .scheme_str()
            .unwrap_or(if self.conn.tls.is_some() {
                "https"
            } else {
                "http"
            })
    }

    /// A header's value by lower-case name as Envoy's matchers see it: pseudo-headers
    /// (`:path`, `:authority`, `:method`, `:scheme`) included, `host` absent (it is
    /// `:authority`), repeated headers joined with
    /// `,` (the only case that allocates), values that are not visible ASCII absent.
    pub fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        match name {
            ":path" => return Some(Cow::Borrowed(self.path())),
            ":authority" => {
                let a = self.authority();
                return (!a.is_empty()).then_some(Cow::Borrowed(a));
            }
            ":method" => return Some(Cow::Borrowed(self.head.method.as_str())),
            ":scheme" => return Some(Cow::Borrowed(self.scheme())),
            // Envoy's codecs turn `host` into `:authority`: a matcher on `host` never sees it.
            "host" => return None,
            _ => {}
        }
        let mut values = self.head.headers.get_all(name).iter();
        let first = values.next()?.to_str().ok()?;
        match values.next() {
            None => Some(Cow::Borrowed(first)),
            Some(second) => {
                let mut joined = format!("{first},{}", second.to_str().ok()?);
                for v in values {
                    joined.push(',');
                    joined.push_str(v.to_str().ok()?);
                }
                Some(Cow::Owned(joined))
            }
        }
    }

    /// The first value of a header (or a pseudo-header), without joining repeats.
    pub fn first_header(&self, name: &str) -> Option<&str> {
        match name {
            ":path" => Some(self.path()),
            ":authority" => Some(self.authority()).filter(|a| !a.is_empty()),
            ":method" => Some(self.head.method.as_str()),
            ":scheme" => Some(self.scheme()),
            _ => self.head.headers.get(name).and_then(|v| v.to_str().ok()),
        }
    }

    /// Writes `key: value` into metadata namespace `ns`, merging with (and overwriting at
    /// the top level) what the namespace already holds, as Envoy's `setDynamicMetadata`.
    pub fn set_metadata(&mut self, ns: &str, key: impl Into<String>, value: serde_json::Value) {
        match self.metadata.get_mut(ns) {
            Some(obj) => {
                obj.insert(key.into(), value);
            }
            None => {
                let mut obj = serde_json::Map::new();
                obj.insert(key.into(), value);
                self.metadata.insert(ns.to_string(), obj);
            }
        }
    }

    /// Merges the top-level keys of `values` into metadata namespace `ns`.
    pub fn merge_metadata(&mut self, ns: &str, values: serde_json::Map<String, serde_json::Value>) {
        match self.metadata.get_mut(ns) {
            Some(obj) => obj.extend(values),
            None => {
                self.metadata.insert(ns.to_string(), values);
            }
        }
    }
}

/// A response flag a filter sets on a request it lets through (fault injection's
/// `DI`), kept in [`RequestState::filter_state`]: the response carries it when
/// nothing later sets one of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamResponseFlag(pub &'static str);
