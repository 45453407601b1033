//! `envoy.filters.http.credential_injector` (generic credential): sets the
//! configured header to the secret on the request. The same filter runs as a
//! connection manager's HTTP filter (counting under
//! `http.<stat_prefix>.credential_injector.`) and as a cluster's upstream
//! filter (under `cluster.<name>.credential_injector.`).

use crate::LocalReply;
use crate::chain::{Decision, HttpFilter};
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::credential_injector::CredentialInjector;
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `<prefix>credential_injector.*`.
#[derive(Debug, Default)]
pub struct CredentialStats {
    /// `injected`.
    pub injected: AtomicU64,
    /// `failed`.
    pub failed: AtomicU64,
    /// `already_exists`.
    pub already_exists: AtomicU64,
}

/// The filter.
#[derive(Debug)]
pub struct CredentialFilter {
    header: HeaderName,
    /// `None`: the secret is empty (every injection fails).
    value: Option<HeaderValue>,
    overwrite: bool,
    allow_without: bool,
    /// Its counters.
    pub stats: Arc<CredentialStats>,
}

impl CredentialFilter {
    /// A filter of `c` (`None` if its header does not make a header; the
    /// config checked it).
    pub fn new(c: &CredentialInjector) -> Option<Self> {
        let header = HeaderName::from_bytes(c.header.as_bytes()).ok()?;
        let value = if c.value.is_empty() {
            None
        } else {
            Some(HeaderValue::from_bytes(&c.value).ok()?)
        };
        Some(Self {
            header,
            value,
            overwrite: c.overwrite,
            allow_without: c.allow_request_without_credential,
            stats: Arc::default(),
        })
    }

    /// Injects the credential into `headers`; `Err` is Envoy's 401 when the
    /// injection failed and requests without a credential are not allowed.
    pub fn inject(&self, headers: &mut HeaderMap) -> Result<(), Box<LocalReply>> {
        if !self.overwrite && headers.contains_key(&self.header) {
            // Kept, and the request goes on.
            self.stats.already_exists.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        match &self.value {
            Some(v) => {
                headers.insert(self.header.clone(), v.clone());
                self.stats.injected.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            None => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                if self.allow_without {
                    Ok(())
                } else {
                    Err(Box::new(LocalReply::new(
                        StatusCode::UNAUTHORIZED,
                        "Failed to inject credential.",
                        "failed_to_inject_credential",
                    )))
                }
            }
        }
    }
}

impl HttpFilter for CredentialFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        match self.inject(&mut req.head.headers) {
            Ok(()) => Decision::Continue,
            Err(r) => Decision::Respond(*r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(overwrite: bool, allow: bool, value: &str) -> CredentialFilter {
        CredentialFilter::new(&CredentialInjector {
            overwrite,
            allow_request_without_credential: allow,
            header: "authorization".into(),
            value: value.as_bytes().to_vec(),
        })
        .unwrap()
    }

    #[test]
    fn injects_keeps_or_fails_as_envoy() {
        let f = filter(false, false, "Bearer x");
        let mut h = HeaderMap::new();
        assert!(f.inject(&mut h).is_ok());
        assert_eq!(h["authorization"], "Bearer x");
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("mine"));
        assert!(f.inject(&mut h).is_ok());
        assert_eq!(h["authorization"], "mine");
        assert_eq!(f.stats.injected.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.already_exists.load(Ordering::Relaxed), 1);
        let f = filter(true, false, "Bearer x");
        f.inject(&mut h).unwrap();
        assert_eq!(h["authorization"], "Bearer x");
        let f = filter(false, false, "");
        let r = f.inject(&mut HeaderMap::new()).unwrap_err();
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(&r.body[..], b"Failed to inject credential.");
        assert!(
            filter(false, true, "")
                .inject(&mut HeaderMap::new())
                .is_ok()
        );
    }
}
