//! A cluster's upstream HTTP filters (`HttpProtocolOptions.http_filters`),
//! run per upstream attempt as Envoy runs them inside each upstream request:
//! [`UpstreamFilters::decode`] on the request head before it goes to the
//! connection pool, [`UpstreamFilters::encode`] on the upstream's response
//! head. The filters courier implements upstream need no I/O, so both are
//! synchronous; their state is per filter (atomics) and per worker
//! (admission control's window), never behind a lock.

pub mod admission_control;

use crate::LocalReply;
use crate::credential_injector::CredentialFilter;
use admission_control::AdmissionFilter;
use courier_config::cluster::upstream_filters::{UpstreamFilter, UpstreamFilterConfig};
use http::HeaderMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One built filter.
#[derive(Debug)]
enum Filter {
    Credential(CredentialFilter),
    Admission(AdmissionFilter),
}

/// A cluster's upstream filters, built once per cluster.
#[derive(Debug, Default)]
pub struct UpstreamFilters {
    filters: Vec<Filter>,
}

/// What one attempt's response must tell the filters: the admission
/// controllers that let it through (bit `i`: filter `i`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Attempt {
    record: u64,
}

impl UpstreamFilters {
    /// The filters of `list` (at most 64 are kept: no config has more).
    pub fn new(list: &[UpstreamFilter]) -> Self {
        let filters = list
            .iter()
            .take(64)
            .filter_map(|f| match &f.config {
                UpstreamFilterConfig::CredentialInjector(c) => {
                    CredentialFilter::new(c).map(Filter::Credential)
                }
                UpstreamFilterConfig::AdmissionControl(c) => {
                    Some(Filter::Admission(AdmissionFilter::new(Arc::clone(c))))
                }
            })
            .collect();
        Self { filters }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Runs the filters, in order, on an attempt's request headers; `Err` is
    /// a filter's local reply, which the attempt answers with instead of
    /// sending (the filters before it have seen it as the response).
    pub fn decode(&self, headers: &mut HeaderMap) -> Result<Attempt, Box<LocalReply>> {
        let mut attempt = Attempt::default();
        for (i, f) in self.filters.iter().enumerate() {
            let reply = match f {
                Filter::Credential(c) => c.inject(headers).err(),
                Filter::Admission(a) if !a.enabled() => None,
                Filter::Admission(a) => {
                    if a.reject() {
                        Some(Box::new(LocalReply::new(
                            http::StatusCode::SERVICE_UNAVAILABLE,
                            "",
                            "denied_by_admission_control",
                        )))
                    } else {
                        attempt.record |= 1 << i;
                        None
                    }
                }
            };
            if let Some(r) = reply {
                self.encode(attempt, r.status.as_u16(), &r.headers, true);
                return Err(r);
            }
        }
        Ok(attempt)
    }

    /// Tells the filters an attempt's response head (`end_stream`: it has no
    /// body). A gRPC response whose status comes in trailers is not recorded
    /// (courier does not pass trailers through the upstream filters).
    pub fn encode(&self, attempt: Attempt, status: u16, headers: &HeaderMap, end_stream: bool) {
        if attempt.record == 0 {
            return;
        }
        let grpc = is_grpc(status, headers, end_stream);
        let grpc_status = if grpc {
            match headers
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u32>().ok())
            {
                Some(s) => Some(s),
                // In the trailers.
                None => return,
            }
        } else {
            None
        };
        for (i, f) in self.filters.iter().enumerate().rev() {
            if let Filter::Admission(a) = f
                && attempt.record & (1 << i) != 0
            {
                a.record(status, grpc_status);
            }
        }
    }

    /// `cluster.<name>.` counters of the filters: (name, value).
    pub fn samples(&self, out: &mut dyn FnMut(&'static str, u64)) {
        for f in &self.filters {
            match f {
                Filter::Credential(c) => {
                    let s = &c.stats;
                    out(
                        "credential_injector.injected",
                        s.injected.load(Ordering::Relaxed),
                    );
                    out(
                        "credential_injector.failed",
                        s.failed.load(Ordering::Relaxed),
                    );
                    out(
                        "credential_injector.already_exists",
                        s.already_exists.load(Ordering::Relaxed),
                    );
                }
                Filter::Admission(a) => {
                    let s = &a.stats;
                    out(
                        "admission_control.rq_rejected",
                        s.rq_rejected.load(Ordering::Relaxed),
                    );
                    out(
                        "admission_control.rq_success",
                        s.rq_success.load(Ordering::Relaxed),
                    );
                    out(
                        "admission_control.rq_failure",
                        s.rq_failure.load(Ordering::Relaxed),
                    );
                }
            }
        }
    }
}

/// Envoy's `isGrpcResponseHeaders`: a trailers-only response (headers that
/// end the stream and carry `grpc-status`), or a 200 with a gRPC content type.
fn is_grpc(status: u16, headers: &HeaderMap, end_stream: bool) -> bool {
    if end_stream {
        return headers.contains_key("grpc-status");
    }
    status == 200
        && headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                ct.strip_prefix("application/grpc").is_some_and(|rest| {
                    rest.is_empty() || rest.starts_with('+') || rest.starts_with(';')
                })
            })
}
