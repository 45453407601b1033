//! The fault injection HTTP filter (`envoy.filters.http.fault`), as Envoy's
//! `FaultFilter` for fixed delays and aborts: the route's `HTTPFault` (or the
//! filter's) decides; a delay (for its share of requests) holds the request for
//! its duration (`DI`), then an abort (for its share) answers with its status and
//! body (`FI`, `fault_filter_abort`; a gRPC status answers gRPC requests in
//! `grpc-status`, others with 200). `max_active_faults` bounds the faults in
//! progress (`faults_overflow` past it). Counters `http.<prefix>.fault.
//! {delays_injected,aborts_injected,faults_overflow,response_rl_injected}` and the
//! gauge `active_faults`.

use crate::chain::{Decision, HttpFilter, LocalReply, Verdict};
use crate::per_worker::PerWorker;
use crate::request::{RequestState, StreamResponseFlag};
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::fault::{AbortStatus, Fault};
use http::StatusCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Fault counters (per worker) and the shared `active_faults` gauge.
#[derive(Debug, Default)]
pub struct FaultStats {
    /// `fault.delays_injected`.
    pub delays_injected: AtomicU64,
    /// `fault.aborts_injected`.
    pub aborts_injected: AtomicU64,
    /// `fault.faults_overflow`: faults not injected for `max_active_faults`.
    pub faults_overflow: AtomicU64,
    /// `fault.response_rl_injected` (courier refuses response rate limits: 0).
    pub response_rl_injected: AtomicU64,
}

/// The fault filter.
#[derive(Debug)]
pub struct FaultFilter {
    config: Arc<Fault>,
    stats: Arc<PerWorker<FaultStats>>,
    active: Arc<AtomicU64>,
}

impl FaultFilter {
    /// A filter with the HCM-level config.
    pub fn new(config: Arc<Fault>) -> Self {
        Self {
            config,
            stats: Arc::new(PerWorker::new(FaultStats::default)),
            active: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<FaultStats>> {
        &self.stats
    }

    /// `fault.active_faults`, shared by every worker.
    pub fn active(&self) -> &Arc<AtomicU64> {
        &self.active
    }
}

/// One fault in progress: counted in `active_faults` until dropped.
struct Active(Arc<AtomicU64>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Envoy's `tryIncActiveFaults`: a place under `max_active_faults`, or overflow.
fn try_active(active: &Arc<AtomicU64>, max: Option<u64>, stats: &FaultStats) -> Option<Active> {
    let now = active.fetch_add(1, Ordering::Relaxed);
    let guard = Active(Arc::clone(active));
    if max.is_some_and(|m| now >= m) {
        stats.faults_overflow.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(guard)
}

fn abort(status: &AbortStatus, body: &str, stats: &FaultStats, flag: &'static str) -> LocalReply {
    stats.aborts_injected.fetch_add(1, Ordering::Relaxed);
    let (code, grpc) = match status {
        AbortStatus::Http(s) => (
            StatusCode::from_u16(*s).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
            None,
        ),
        // A non-gRPC request gets 200 with the body (Envoy 1.40, checked in
        // tests/fault_differential.rs).
        AbortStatus::Grpc(g) => (StatusCode::OK, u16::try_from(*g).ok()),
    };
    let mut r = LocalReply::new(code, body.to_string(), "fault_filter_abort");
    r.response_flag = Some(flag);
    r.grpc_status = grpc;
    r
}

impl HttpFilter for FaultFilter {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut RequestState<'_>,
        per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        let config: &Fault = match per_route {
            Some(PerRouteFilterConfig::Fault(f)) => f,
            _ => &self.config,
        };
        let stats = self.stats.get(req.conn.worker);
        let delay = config
            .delay
            .as_ref()
            .filter(|(_, pct)| pct.admits(fastrand::u64(..)));
        let abort_now = || {
            config
                .abort
                .as_ref()
                .filter(|(_, pct, _)| pct.admits(fastrand::u64(..)))
        };
        if let Some((duration, _)) = delay
            && let Some(active) = try_active(&self.active, config.max_active_faults, stats)
        {
            stats.delays_injected.fetch_add(1, Ordering::Relaxed);
            req.filter_state.insert(StreamResponseFlag("DI"));
            let duration = *duration;
            return Decision::Pending(Box::pin(async move {
                tokio::time::sleep(duration).await;
                // The abort after the delay, under the delay's place.
                let verdict = match abort_now() {
                    // Both faults show, as Envoy's flags list them.
                    Some((status, _, body)) => {
                        Verdict::Respond(abort(status, body, stats, "DI,FI"))
                    }
                    None => Verdict::Continue,
                };
                drop(active);
                verdict
            }));
        }
        if let Some((status, _, body)) = abort_now()
            && let Some(_active) = try_active(&self.active, config.max_active_faults, stats)
        {
            return Decision::Respond(abort(status, body, stats, "FI"));
        }
        Decision::Continue
    }
}
