//! `envoy.config.core.v3.HttpUri` and the core `RetryPolicy`: how the filters reach an
//! HTTP server through a cluster (jwt_authn `remote_jwks`, ext_authz `http_service`).

use crate::core;
use crate::ctx::Ctx;
use crate::path::Path;
use crate::route::{RetryBackOff, RetryOn};
use envoy_types::pb::envoy::config::core::v3 as pb;
use std::time::Duration;

/// A validated `HttpUri`: a URI fetched through a courier cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUri {
    /// The URI as written (Envoy needs it non-empty but not a URL: `uri: ext_authz` is valid).
    pub uri: String,
    /// `:authority` of the request, split from `uri` once here (Envoy's `extractHostPathFromUri`).
    pub host: String,
    /// `:path` of the request (with query), split from `uri`; `/` when the URI has no path.
    pub path: String,
    /// The cluster the request goes through.
    pub cluster: String,
    /// Deadline of the request; `None` for `0s` (a zero timeout means none in Envoy's
    /// async HTTP client).
    pub timeout: Option<Duration>,
}

/// Translates an `HttpUri` (required at `path`). Its cluster may be unknown (Envoy
/// resolves it per request).
pub fn http_uri(u: Option<&pb::HttpUri>, path: &Path<'_>, ctx: &mut Ctx) -> Option<HttpUri> {
    use pb::http_uri::HttpUpstreamType;
    let Some(u) = u else {
        ctx.error(path, "is required");
        return None;
    };
    let mut ok = true;
    if u.uri.is_empty() {
        ctx.error(&path.field("uri"), "must not be empty");
        ok = false;
    }
    let cluster = match &u.http_upstream_type {
        Some(HttpUpstreamType::Cluster(c)) if c.is_empty() => {
            ctx.error(&path.field("cluster"), "must not be empty");
            ok = false;
            String::new()
        }
        // An unknown cluster is not an error: Envoy resolves it per request, and the
        // request fails then (jwt_authn `Jwks remote fetch is failed`, ext_authz's error
        // path), as Envoy's `FetchFailedMissingCluster` integration test expects.
        Some(HttpUpstreamType::Cluster(c)) => c.clone(),
        None => {
            ctx.error(&path.field("cluster"), "is required");
            ok = false;
            String::new()
        }
    };
    let timeout = match u.timeout.as_ref() {
        Some(d) => {
            let d = core::duration(d, &path.field("timeout"), ctx);
            ok &= d.is_some();
            d.filter(|d| !d.is_zero())
        }
        None => {
            ctx.error(&path.field("timeout"), "is required");
            ok = false;
            None
        }
    };
    if !ok {
        return None;
    }
    let (host, req_path) = split_host_path(&u.uri);
    Some(HttpUri {
        uri: u.uri.clone(),
        host,
        path: req_path,
        cluster,
        timeout,
    })
}

/// Splits `scheme://host/path?q` into `host` and `/path?q`, as Envoy's
/// `Http::Utility::extractHostPathFromUri` does (no scheme: the host starts at 0).
fn split_host_path(uri: &str) -> (String, String) {
    let rest = uri.find("://").map_or(uri, |i| &uri[i + 3..]);
    match rest.find('/') {
        Some(i) => (rest[..i].to_string(), rest[i..].to_string()),
        None => (rest.to_string(), "/".to_string()),
    }
}

/// A validated core `RetryPolicy` (remote JWKS fetches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchRetryPolicy {
    /// Retries after the first attempt (default 1).
    pub num_retries: u32,
    /// First back-off interval (default 1 s).
    pub base_interval: Duration,
    /// Longest back-off interval (default 10 × `base_interval`).
    pub max_interval: Duration,
}

/// Default back-off base interval of a core `RetryPolicy`.
pub const DEFAULT_RETRY_BASE_INTERVAL: Duration = Duration::from_secs(1);

/// Translates a core `RetryPolicy` of a remote JWKS fetch (only `num_retries` and
/// `retry_back_off`: Envoy's fetcher retries on its own fixed conditions, so a `retry_on`
/// is refused here; the support table refuses the other fields).
pub fn retry_policy(
    r: &pb::RetryPolicy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<FetchRetryPolicy> {
    if !r.retry_on.is_empty() {
        ctx.unsupported(
            &path.field("retry_on"),
            "retry_on on a remote JWKS fetch (Envoy's fetcher ignores it)",
        );
        return None;
    }
    let num_retries = core::u32_or(r.num_retries.as_ref(), 1);
    let (base_interval, max_interval) = match r.retry_back_off.as_ref() {
        None => (
            DEFAULT_RETRY_BASE_INTERVAL,
            DEFAULT_RETRY_BASE_INTERVAL * 10,
        ),
        Some(b) => backoff(b, &path.field("retry_back_off"), ctx)?,
    };
    Some(FetchRetryPolicy {
        num_retries,
        base_interval,
        max_interval,
    })
}

/// A core `RetryPolicy` as Envoy's async clients apply it (ext_authz `http_service` and
/// an `envoy_grpc` `GrpcService`): `Http::Utility::convertCoreToRouteRetryPolicy` makes it
/// a route retry policy with this `retry_on`, `num_retries`, the back-off, and the
/// back-off's `max_interval` as the per-try timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallRetryPolicy {
    /// Conditions that trigger a retry (empty: none, so no retries).
    pub retry_on: RetryOn,
    /// Retries after the first attempt (default 1).
    pub num_retries: u32,
    /// The jittered exponential back-off between attempts (default 1 s, max 10 × base).
    pub back_off: RetryBackOff,
}

impl CallRetryPolicy {
    /// The timeout of each attempt: Envoy sets the route policy's `per_try_timeout` to the
    /// back-off's `max_interval`.
    pub fn per_try_timeout(&self) -> Duration {
        self.back_off.max_interval
    }
}

/// Translates a core `RetryPolicy` for an async client ([`CallRetryPolicy`]). `retry_on`
/// takes the route's conditions (HTTP and gRPC names); an unknown one is refused (Envoy
/// skips it, which hides a typo). A `max_interval` below `base_interval` is accepted as
/// Envoy's conversion does, with the base halved to `max_interval / 2`.
pub fn call_retry_policy(
    r: &pb::RetryPolicy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<CallRetryPolicy> {
    let retry_on = match RetryOn::parse(&r.retry_on) {
        Ok(on) => on,
        Err(e) => {
            ctx.error(&path.field("retry_on"), e);
            return None;
        }
    };
    let num_retries = core::u32_or(r.num_retries.as_ref(), 1);
    let (base_interval, max_interval) = match r.retry_back_off.as_ref() {
        None => (
            DEFAULT_RETRY_BASE_INTERVAL,
            DEFAULT_RETRY_BASE_INTERVAL * 10,
        ),
        Some(b) => {
            let bp = path.field("retry_back_off");
            let base = match b.base_interval.as_ref() {
                None => {
                    ctx.error(&bp.field("base_interval"), "is required");
                    return None;
                }
                Some(d) => core::duration(d, &bp.field("base_interval"), ctx)?,
            };
            if base < Duration::from_millis(1) {
                ctx.error(&bp.field("base_interval"), "must be at least 1ms");
                return None;
            }
            let max = match b.max_interval.as_ref() {
                None => base * 10,
                Some(d) => {
                    let max = core::duration(d, &bp.field("max_interval"), ctx)?;
                    if max.is_zero() {
                        ctx.error(&bp.field("max_interval"), "must be greater than 0s");
                        return None;
                    }
                    max
                }
            };
            // Envoy works on whole milliseconds here.
            let ms = |d: Duration| Duration::from_millis(d.as_millis() as u64);
            let (base, max) = (ms(base), ms(max));
            if max < base {
                (max / 2, max)
            } else {
                (base, max)
            }
        }
    };
    Some(CallRetryPolicy {
        retry_on,
        num_retries,
        back_off: RetryBackOff {
            base_interval,
            max_interval,
        },
    })
}

/// Translates a `BackoffStrategy` into (base, max).
fn backoff(
    b: &pb::BackoffStrategy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<(Duration, Duration)> {
    let bp = path.field("base_interval");
    let base = match b.base_interval.as_ref() {
        None => {
            ctx.error(&bp, "is required");
            return None;
        }
        Some(d) => core::duration(d, &bp, ctx)?,
    };
    if base < Duration::from_millis(1) {
        ctx.error(&bp, "must be at least 1ms");
        return None;
    }
    let mp = path.field("max_interval");
    let max = match b.max_interval.as_ref() {
        None => base * 10,
        Some(d) => {
            let max = core::duration(d, &mp, ctx)?;
            if max.is_zero() {
                ctx.error(&mp, "must be greater than 0s");
                return None;
            }
            if max < base {
                ctx.error(&mp, "must not be below base_interval");
                return None;
            }
            max
        }
    };
    Some((base, max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Duration as PbDuration;

    #[test]
    fn splits_host_and_path() {
        assert_eq!(
            split_host_path("https://example.com/jwks.json?x=1"),
            ("example.com".into(), "/jwks.json?x=1".into())
        );
        assert_eq!(
            split_host_path("ext_authz"),
            ("ext_authz".into(), "/".into())
        );
        assert_eq!(
            split_host_path("http://a:8080"),
            ("a:8080".into(), "/".into())
        );
    }

    #[test]
    fn http_uri_requires_timeout_and_cluster() {
        let mut ctx = Ctx::new();
        let u = pb::HttpUri {
            uri: String::new(),
            timeout: None,
            http_upstream_type: None,
        };
        assert!(http_uri(Some(&u), &Path::ROOT.field("u"), &mut ctx).is_none());
        let errs = ctx.finish(()).unwrap_err().to_string();
        assert!(errs.contains("u.uri: must not be empty"), "{errs}");
        assert!(errs.contains("u.cluster: is required"), "{errs}");
        assert!(errs.contains("u.timeout: is required"), "{errs}");
    }

    #[test]
    fn retry_policy_defaults() {
        let mut ctx = Ctx::new();
        let r = retry_policy(&pb::RetryPolicy::default(), &Path::ROOT, &mut ctx).unwrap();
        assert_eq!(r.num_retries, 1);
        assert_eq!(r.base_interval, Duration::from_secs(1));
        assert_eq!(r.max_interval, Duration::from_secs(10));
        let bad = pb::RetryPolicy {
            retry_back_off: Some(pb::BackoffStrategy {
                base_interval: Some(PbDuration {
                    seconds: 2,
                    nanos: 0,
                }),
                max_interval: Some(PbDuration {
                    seconds: 1,
                    nanos: 0,
                }),
            }),
            ..Default::default()
        };
        assert!(retry_policy(&bad, &Path::ROOT, &mut ctx).is_none());
        assert!(ctx.has_errors());
    }
}
