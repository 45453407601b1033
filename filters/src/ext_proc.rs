//! The external processing HTTP filter (`envoy.filters.http.ext_proc`) for the processing
//! modes courier accepts: headers and trailers `SKIP`, bodies `NONE` (config refuses the
//! rest). With nothing to send, Envoy never opens a stream to the processor, so the filter
//! lets every request and response through untouched and builds no future; it keeps
//! Envoy's counters (`http.<hcm prefix>.ext_proc.[<stat_prefix>.]<name>`), which exist
//! from the start and stay at 0.

use crate::chain::{Decision, HttpFilter};
use crate::per_worker::PerWorker;
use crate::request::RequestState;
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::ext_proc::ExtProc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The names of Envoy 1.40's ext_proc counters, in [`ExtProcStats::counters`] order
/// (checked against Envoy's `/stats` in `tests/ext_proc_differential.rs`).
pub const COUNTER_NAMES: [&str; 17] = [
    "clear_route_cache_disabled",
    "clear_route_cache_ignored",
    "clear_route_cache_upstream_ignored",
    "failure_mode_allowed",
    "http_not_ok_resp_received",
    "immediate_responses_sent",
    "message_timeouts",
    "override_message_timeout_ignored",
    "override_message_timeout_received",
    "rejected_header_mutations",
    "server_half_closed",
    "spurious_msgs_received",
    "stream_msgs_received",
    "stream_msgs_sent",
    "streams_closed",
    "streams_failed",
    "streams_started",
];

/// ext_proc counters (none moves while the processor is never called).
#[derive(Debug, Default)]
pub struct ExtProcStats {
    /// One counter per entry of [`COUNTER_NAMES`].
    pub counters: [AtomicU64; COUNTER_NAMES.len()],
}

/// The ext_proc filter.
#[derive(Debug)]
pub struct ExtProcFilter {
    config: Arc<ExtProc>,
    stats: Arc<PerWorker<ExtProcStats>>,
}

impl ExtProcFilter {
    /// A filter with the HCM-level `config`.
    pub fn new(config: Arc<ExtProc>) -> Self {
        Self {
            config,
            stats: Arc::new(PerWorker::new(ExtProcStats::default)),
        }
    }

    /// The filter's counters.
    pub fn stats(&self) -> &Arc<PerWorker<ExtProcStats>> {
        &self.stats
    }

    /// `stat_prefix` (empty: none).
    pub fn stat_prefix(&self) -> &str {
        &self.config.stat_prefix
    }
}

impl HttpFilter for ExtProcFilter {
    fn decode_headers<'r>(
        &'r self,
        _req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        // Every accepted mode (the filter's and any route's override) skips headers,
        // trailers and bodies: there is no message to send, so no stream is opened.
        Decision::Continue
    }
}
