//! A cluster's upstream HTTP filters (`HttpProtocolOptions.http_filters`),
//! run per upstream attempt as Envoy runs them inside each upstream request:
//! [`UpstreamFilters::decode`] on the request head before it goes to the
//! connection pool, [`UpstreamFilters::encode`] on the upstream's response
//! head. The filters courier implements upstream need no I/O, so both are
//! synchronous; their state is per filter (atomics) and per worker
//! (admission control's window), never behind a lock.

pub mod admission_control;

use crate::LocalReply;
use crate::chain::{BodyEncoder, EncodeError};
use crate::credential_injector::CredentialFilter;
use admission_control::AdmissionFilter;
use bytes::Bytes;
use courier_config::cluster::upstream_filters::{UpstreamFilter, UpstreamFilterConfig};
use http::HeaderMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One built filter.
#[derive(Debug)]
enum Filter {
    Credential(CredentialFilter),
    Admission(Arc<AdmissionFilter>),
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
    /// The filters of `list` (the config allows at most
    /// [`courier_config::cluster::upstream_filters::MAX_FILTERS`], one bit
    /// each in an [`Attempt`]).
    pub fn new(list: &[UpstreamFilter]) -> Self {
        let filters = list
            .iter()
            .take(courier_config::cluster::upstream_filters::MAX_FILTERS)
            .filter_map(|f| match &f.config {
                UpstreamFilterConfig::CredentialInjector(c) => {
                    CredentialFilter::new(c).map(Filter::Credential)
                }
                UpstreamFilterConfig::AdmissionControl(c) => Some(Filter::Admission(Arc::new(
                    AdmissionFilter::new(Arc::clone(c)),
                ))),
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
    /// body). A gRPC response whose status is not in its headers is recorded
    /// from its trailers: the returned recorder goes on its body.
    pub fn encode(
        &self,
        attempt: Attempt,
        status: u16,
        headers: &HeaderMap,
        end_stream: bool,
    ) -> Option<GrpcTrailers> {
        if attempt.record == 0 {
            return None;
        }
        let recording = || {
            self.filters
                .iter()
                .enumerate()
                .rev()
                .filter_map(move |(i, f)| match f {
                    Filter::Admission(a) if attempt.record & (1 << i) != 0 => Some(a),
                    _ => None,
                })
        };
        if !is_grpc(status, headers, end_stream) {
            recording().for_each(|a| a.record(status, None));
            return None;
        }
        match grpc_status(headers) {
            Some(g) => {
                recording().for_each(|a| a.record(status, Some(g)));
                None
            }
            // In the trailers.
            None => Some(GrpcTrailers {
                filters: recording().cloned().collect(),
            }),
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

/// A `grpc-status` header's code.
fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u32>().ok())
}

/// The admission controllers waiting for a gRPC response's trailers (Envoy's
/// `encodeTrailers`): a response body encoder that records the trailers'
/// `grpc-status` (a failure without one). A body that ends without trailers
/// records nothing, as in Envoy.
#[derive(Debug, Clone)]
pub struct GrpcTrailers {
    filters: Vec<Arc<AdmissionFilter>>,
}

impl BodyEncoder for GrpcTrailers {
    fn encode_data(&mut self, data: Bytes, _end_stream: bool) -> Result<Bytes, EncodeError> {
        Ok(data)
    }

    fn encode_trailers(&mut self, trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        let status = grpc_status(trailers);
        for a in self.filters.drain(..) {
            // Without a status the response is a failure (`record(0, ..)`
            // reads no HTTP status for a gRPC response).
            match status {
                Some(g) => a.record(200, Some(g)),
                None => a.record_failure(),
            }
        }
        Ok(Bytes::new())
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

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::cluster::upstream_filters::UpstreamFilter;
    use courier_config::filters::admission_control::{AdmissionControl, SuccessCriteria};
    use std::time::Duration;

    fn filters() -> UpstreamFilters {
        UpstreamFilters::new(&[UpstreamFilter {
            name: "ac".into(),
            config: UpstreamFilterConfig::AdmissionControl(Arc::new(AdmissionControl {
                enabled: true,
                sampling_window: Duration::from_secs(30),
                aggression: 1.0,
                sr_threshold: 0.95,
                rps_threshold: 0,
                // Never rejects: every request is recorded.
                max_rejection_probability: 0.0,
                criteria: SuccessCriteria {
                    http: None,
                    grpc: vec![0],
                },
            })),
        }])
    }

    fn counts(f: &UpstreamFilters) -> (u64, u64) {
        let mut out = (0, 0);
        f.samples(&mut |name, v| match name {
            "admission_control.rq_success" => out.0 = v,
            "admission_control.rq_failure" => out.1 = v,
            _ => {}
        });
        out
    }

    #[tokio::test(start_paused = true)]
    async fn grpc_statuses_from_headers_or_trailers() {
        let f = filters();
        let mut grpc = HeaderMap::new();
        grpc.insert("content-type", "application/grpc".parse().unwrap());
        // The status in the trailers: recorded when they arrive.
        let a = f.decode(&mut HeaderMap::new()).unwrap();
        let mut t = f.encode(a, 200, &grpc, false).unwrap();
        assert_eq!(counts(&f), (0, 0));
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "14".parse().unwrap());
        t.encode_trailers(&mut trailers).unwrap();
        assert_eq!(counts(&f), (0, 1));
        // Trailers-only: the status in the headers.
        let a = f.decode(&mut HeaderMap::new()).unwrap();
        let mut only = grpc.clone();
        only.insert("grpc-status", "0".parse().unwrap());
        assert!(f.encode(a, 200, &only, true).is_none());
        assert_eq!(counts(&f), (1, 1));
        // Not gRPC (a 503 with a gRPC content type): the HTTP status decides.
        let a = f.decode(&mut HeaderMap::new()).unwrap();
        assert!(f.encode(a, 503, &grpc, false).is_none());
        assert_eq!(counts(&f), (1, 2));
    }
}
