//! Outlier detection (placeholder while retries land).

use super::UpstreamCluster;
use super::host::Host;
use super::pool::SendError;

/// Records an upstream response status.
pub fn record_status(_cluster: &UpstreamCluster, _host: &Host, _status: u16) {}

/// Records a failure without a response.
pub fn record_failure(_cluster: &UpstreamCluster, _host: &Host, _e: &SendError) {}

/// Records a timeout.
pub fn record_timeout(_cluster: &UpstreamCluster, _host: &Host) {}
