//! The connection manager's edge-check counters (`http.<prefix>.*`).

use super::Counter;

/// Counters of the edge checks (`http.<prefix>.*`).
#[derive(Debug, Default)]
pub struct EdgeStats {
    /// `downstream_rq_overload_close`.
    pub overload_close: Counter,
    /// `downstream_rq_failed_path_normalization`.
    pub failed_path_normalization: Counter,
    /// `downstream_rq_redirected_with_normalized_path`.
    pub redirected_with_normalized_path: Counter,
    /// `requests_rejected_with_underscores_in_headers`.
    pub rejected_underscores: Counter,
    /// `dropped_headers_with_underscores`.
    pub dropped_underscores: Counter,
    /// `downstream_cx_max_duration_reached`.
    pub cx_max_duration_reached: Counter,
    /// `downstream_rq_max_duration_reached`.
    pub rq_max_duration_reached: Counter,
}

impl EdgeStats {
    /// Samples by Envoy's names (relative to `http.<prefix>.`).
    pub fn samples(&self) -> [(&'static str, u64); 7] {
        [
            ("downstream_rq_overload_close", self.overload_close.get()),
            (
                "downstream_rq_failed_path_normalization",
                self.failed_path_normalization.get(),
            ),
            (
                "downstream_rq_redirected_with_normalized_path",
                self.redirected_with_normalized_path.get(),
            ),
            (
                "requests_rejected_with_underscores_in_headers",
                self.rejected_underscores.get(),
            ),
            (
                "dropped_headers_with_underscores",
                self.dropped_underscores.get(),
            ),
            (
                "downstream_cx_max_duration_reached",
                self.cx_max_duration_reached.get(),
            ),
            (
                "downstream_rq_max_duration_reached",
                self.rq_max_duration_reached.get(),
            ),
        ]
    }
}
