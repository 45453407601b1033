//! `envoy.filters.http.dynamic_forward_proxy`: for a route to a dynamic
//! forward proxy cluster, rewrites the host as the route's `PerRouteConfig`
//! says, then holds the request (without blocking the worker) until the DNS
//! cache has resolved it; a failed resolution is Envoy's local reply.

pub mod cache;
pub mod store;

use crate::chain::{Decision, HttpFilter, LocalReply, Verdict};
use crate::request::RequestState;
use cache::{Answer, LookupError};
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::dynamic_forward_proxy::{DynamicForwardProxy, HostRewrite};
use http::{HeaderValue, StatusCode, Uri, header};
use std::sync::Arc;

/// The filter.
#[derive(Debug)]
pub struct DynamicForwardProxyFilter {
    /// Kept so the filter's cache lives while the filter does (Envoy's filter
    /// holds its cache; the cluster's, of the same name, is the same one).
    _cache: Arc<cache::DnsCache>,
}

impl DynamicForwardProxyFilter {
    /// A filter for `config`.
    pub fn new(config: &DynamicForwardProxy) -> Self {
        Self {
            _cache: cache::DnsCache::get(&config.cache),
        }
    }
}

/// The local reply for a host that did not resolve (Envoy's
/// `onDnsResolutionFail`).
pub fn resolution_failure(details: &str) -> LocalReply {
    let mut r = LocalReply::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "DNS resolution failure",
        format!("dns_resolution_failure{{{details}}}"),
    );
    r.response_flag = Some("DF");
    r
}

/// The local reply for a lookup the cache refused.
pub fn lookup_refused(e: LookupError) -> LocalReply {
    match e {
        LookupError::Overflow => LocalReply::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "DNS cache overflow",
            "dns_cache_overflow",
        ),
        LookupError::PendingOverflow => LocalReply::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Dynamic forward proxy pending request overflow",
            "dynamic_forward_proxy_pending_request_overflow",
        ),
    }
}

impl HttpFilter for DynamicForwardProxyFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        // Only routes to a dynamic forward proxy cluster: other clusters
        // manage their own DNS.
        let Some(cluster) = req
            .route
            .as_ref()
            .and_then(|r| r.cluster)
            .and_then(store::find)
        else {
            return Decision::Continue;
        };
        if let Some(PerRouteFilterConfig::DynamicForwardProxy(Some(rewrite))) = per_route {
            let host = match rewrite {
                HostRewrite::Literal(l) => Some(l.clone()),
                // Only the first value of the (untrusted) header, as Envoy.
                HostRewrite::Header(h) => req
                    .head
                    .headers
                    .get(h.as_str())
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            };
            if let Some(h) = host {
                set_authority(&mut req.head, &h);
            }
        }
        let authority = req.authority().to_string();
        if authority.is_empty() {
            // Envoy's `dfp_fail_on_empty_host_header`.
            return Decision::Respond(LocalReply::new(
                StatusCode::BAD_REQUEST,
                "Empty host header",
                "empty_host_header",
            ));
        }
        // A cached answer goes on at once, without a future.
        if let Some(e) = cluster.cache.cached(&authority, cluster.default_port) {
            match &*e.answer() {
                Answer::Resolved(_) => return Decision::Continue,
                Answer::Failed(details) => {
                    return Decision::Respond(resolution_failure(details));
                }
                Answer::Pending => {}
            }
        }
        Decision::Pending(Box::pin(async move {
            match cluster
                .cache
                .resolve(&authority, cluster.default_port)
                .await
            {
                Ok(Some(a)) => verdict(&a).map_or(Verdict::Continue, Verdict::Respond),
                // Not a host name: the router finds no host for it.
                Ok(None) => Verdict::Continue,
                Err(e) => Verdict::Respond(lookup_refused(e)),
            }
        }))
    }
}

/// The reply a finished answer calls for: none once resolved.
fn verdict(a: &Answer) -> Option<LocalReply> {
    match a {
        Answer::Failed(details) => Some(resolution_failure(details)),
        Answer::Resolved(_) | Answer::Pending => None,
    }
}

/// Sets `:authority` (the URI's, when it has one, and the `host` header).
fn set_authority(head: &mut http::request::Parts, host: &str) {
    let Ok(value) = HeaderValue::from_str(host) else {
        return;
    };
    if head.uri.authority().is_some()
        && let Ok(authority) = http::uri::Authority::try_from(host)
    {
        let mut parts = head.uri.clone().into_parts();
        parts.authority = Some(authority);
        if let Ok(uri) = Uri::from_parts(parts) {
            head.uri = uri;
        }
    }
    if head.headers.contains_key(header::HOST) || head.uri.authority().is_none() {
        head.headers.insert(header::HOST, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::SelectedRoute;
    use crate::test_support::{head, plain_conn, state};
    use courier_config::cluster::DnsLookupFamily;
    use courier_config::dns_cache::DnsCacheConfig;
    use std::time::Duration;

    fn filter(name: &str) -> (DynamicForwardProxyFilter, Arc<cache::DnsCache>) {
        let config = DynamicForwardProxy {
            cache: DnsCacheConfig {
                name: name.to_string(),
                lookup_family: DnsLookupFamily::V4Only,
                refresh_rate: Duration::from_secs(60),
                host_ttl: Duration::from_secs(300),
                max_hosts: 16,
                max_pending_requests: 16,
            },
        };
        let f = DynamicForwardProxyFilter::new(&config);
        (f, cache::DnsCache::get(&config.cache))
    }

    async fn decide(
        f: &DynamicForwardProxyFilter,
        req: &mut RequestState<'_>,
        per_route: Option<&PerRouteFilterConfig>,
    ) -> Option<LocalReply> {
        match f.decode_headers(req, per_route) {
            Decision::Continue => None,
            Decision::Respond(r) => Some(r),
            Decision::Pending(p) => match p.await {
                Verdict::Continue => None,
                Verdict::Respond(r) => Some(r),
            },
        }
    }

    #[tokio::test]
    async fn resolves_for_dynamic_clusters_only_and_rewrites_first() {
        let (f, cache) = filter("filter-test");
        store::register(
            "dfp-filter-test",
            store::DynamicCluster {
                cache: Arc::clone(&cache),
                default_port: 80,
            },
        );
        let conn = plain_conn();
        // Another cluster: nothing to resolve, even an unresolvable host.
        let mut req = state(&conn, head("GET", "/", &[("host", "nonexistent.invalid")]));
        req.route = Some(SelectedRoute {
            cluster: Some("static-filter-test"),
            ..Default::default()
        });
        assert!(matches!(
            f.decode_headers(&mut req, None),
            Decision::Continue
        ));
        assert!(cache.is_empty());
        // The dynamic cluster: Envoy's DNS failure reply.
        req.route = Some(SelectedRoute {
            cluster: Some("dfp-filter-test"),
            ..Default::default()
        });
        let r = decide(&f, &mut req, None).await.expect("a reply");
        assert_eq!(
            (r.status, &r.body[..]),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                &b"DNS resolution failure"[..]
            )
        );
        assert!(
            r.details.starts_with("dns_resolution_failure{"),
            "{}",
            r.details
        );
        assert_eq!(r.response_flag, Some("DF"));
        // The cached failure answers at once, without a future.
        assert!(matches!(
            f.decode_headers(&mut req, None),
            Decision::Respond(_)
        ));
        // A literal rewrite first: the new host resolves, the request goes on with it.
        let rewrite = PerRouteFilterConfig::DynamicForwardProxy(Some(HostRewrite::Literal(
            "localhost:9".into(),
        )));
        assert!(decide(&f, &mut req, Some(&rewrite)).await.is_none());
        assert_eq!(req.authority(), "localhost:9");
        assert!(cache.cached("localhost:9", 80).is_some());
        // A header rewrite takes the header's first value; absent, no rewrite.
        let by_header =
            PerRouteFilterConfig::DynamicForwardProxy(Some(HostRewrite::Header("x-host".into())));
        let mut req = state(
            &conn,
            head(
                "GET",
                "/",
                &[("host", "a.invalid"), ("x-host", "localhost:10")],
            ),
        );
        req.route = Some(SelectedRoute {
            cluster: Some("dfp-filter-test"),
            ..Default::default()
        });
        assert!(decide(&f, &mut req, Some(&by_header)).await.is_none());
        assert_eq!(req.authority(), "localhost:10");
        store::unregister("dfp-filter-test");
    }
}
