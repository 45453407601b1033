//! The outlier-detection event log (`cluster_manager.outlier_detection.event_log_path`):
//! one JSON line per ejection and unejection, shaped as Envoy's
//! `envoy.data.cluster.v3.OutlierDetectionEvent` in proto3 JSON with default
//! values printed, so tools that read Envoy's log read courier's.

use super::Kind;
use crate::upstream::host::Host;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::SystemTime;

/// An open event log. Only the main thread writes (the detectors run there);
/// each event is one `write` of a whole line to a file opened for appending.
#[derive(Debug)]
pub struct EventLog {
    file: File,
}

/// What an ejection was based on (the event's `event` oneof).
#[derive(Debug, Clone, Copy)]
pub enum Evidence {
    /// A consecutive-failure threshold.
    Consecutive,
    /// The success-rate analysis: the host's rate, the cluster's mean and the
    /// ejection threshold, in percent.
    SuccessRate {
        /// The host's success rate.
        host: f64,
        /// The mean over the hosts analysed.
        average: f64,
        /// The rate below which hosts are ejected.
        threshold: f64,
    },
    /// The failure-percentage analysis: the host's success rate, in percent.
    FailurePercentage {
        /// The host's success rate.
        host: f64,
    },
}

/// One event.
#[derive(Debug)]
pub struct Event<'a> {
    /// The cluster's name.
    pub cluster: &'a str,
    /// The host.
    pub host: &'a Host,
    /// `None` for an unejection.
    pub eject: Option<(Kind, Evidence, bool)>,
    /// Seconds since the host's previous opposite action, when it had one.
    pub secs_since_last_action: Option<u64>,
    /// Times the host has been ejected.
    pub num_ejections: u32,
}

impl EventLog {
    /// Opens (creating, appending) the log at `path`.
    pub fn open(path: &str) -> Result<Self, String> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(|file| Self { file })
            .map_err(|e| format!("outlier detection event log {path}: {e}"))
    }

    /// Appends `event`. A failed write is reported in the process log only: an
    /// event log must not stop outlier detection.
    pub fn write(&self, event: &Event<'_>) {
        let line = render(event, SystemTime::now());
        if let Err(e) = (&self.file).write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "outlier detection event log: write failed");
        }
    }
}

/// Envoy's `OutlierEjectionType` names.
fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Consecutive5xx => "CONSECUTIVE_5XX",
        Kind::ConsecutiveGateway => "CONSECUTIVE_GATEWAY_FAILURE",
        Kind::ConsecutiveLocalOrigin => "CONSECUTIVE_LOCAL_ORIGIN_FAILURE",
        Kind::SuccessRate => "SUCCESS_RATE",
        Kind::LocalOriginSuccessRate => "SUCCESS_RATE_LOCAL_ORIGIN",
        Kind::FailurePercentage => "FAILURE_PERCENTAGE",
        Kind::LocalOriginFailurePercentage => "FAILURE_PERCENTAGE_LOCAL_ORIGIN",
    }
}

/// One line, its fields in the proto's order (Envoy's own lines byte for byte,
/// but for the time).
fn render(event: &Event<'_>, now: SystemTime) -> String {
    let mut timestamp = String::with_capacity(24);
    crate::log_time::default_format(now, &mut timestamp);
    // An unejection leaves the type at its default, as Envoy's does.
    let (kind, action, enforced) = match event.eject {
        Some((kind, _, enforced)) => (kind, "EJECT", enforced),
        None => (Kind::Consecutive5xx, "UNEJECT", false),
    };
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let mut line = format!(
        "{{\"type\":\"{}\",\"timestamp\":\"{timestamp}\",",
        type_name(kind)
    );
    if let Some(secs) = event.secs_since_last_action {
        // A UInt64Value: proto3 JSON writes 64-bit integers as strings.
        let _ = write!(line, "\"secs_since_last_action\":\"{secs}\",");
    }
    let _ = write!(
        line,
        "\"cluster_name\":{},\"upstream_url\":\"{}\",\"action\":\"{action}\",\
         \"num_ejections\":{},\"enforced\":{enforced}",
        text(event.cluster),
        event.host.address_text(),
        event.num_ejections,
    );
    // uint32 percentages, truncated as Envoy's conversion does.
    let pct = |v: f64| v.clamp(0.0, 100.0) as u32;
    match event.eject.map(|(_, evidence, _)| evidence) {
        Some(Evidence::Consecutive) => line.push_str(",\"eject_consecutive_event\":{}"),
        Some(Evidence::SuccessRate {
            host,
            average,
            threshold,
        }) => {
            let _ = write!(
                line,
                ",\"eject_success_rate_event\":{{\"host_success_rate\":{},\
                 \"cluster_average_success_rate\":{},\
                 \"cluster_success_rate_ejection_threshold\":{}}}",
                pct(host),
                pct(average),
                pct(threshold)
            );
        }
        Some(Evidence::FailurePercentage { host }) => {
            let _ = write!(
                line,
                ",\"eject_failure_percentage_event\":{{\"host_success_rate\":{}}}",
                pct(host)
            );
        }
        None => {}
    }
    line.push_str("}\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn events_render_as_envoys_json() {
        let host = Host::new("127.0.0.1:8080".parse().unwrap(), String::new(), 1, true);
        let at = UNIX_EPOCH + Duration::from_millis(1_764_712_800_123);
        let eject = Event {
            cluster: "c",
            host: &host,
            eject: Some((Kind::ConsecutiveGateway, Evidence::Consecutive, true)),
            secs_since_last_action: None,
            num_ejections: 1,
        };
        // A line as Envoy 1.40 writes it (its field order included).
        assert_eq!(
            render(&eject, at),
            "{\"type\":\"CONSECUTIVE_GATEWAY_FAILURE\",\"timestamp\":\"2025-12-02T22:00:00.123Z\",\
             \"cluster_name\":\"c\",\"upstream_url\":\"127.0.0.1:8080\",\"action\":\"EJECT\",\
             \"num_ejections\":1,\"enforced\":true,\"eject_consecutive_event\":{}}\n"
        );
        let sr = Event {
            eject: Some((
                Kind::SuccessRate,
                Evidence::SuccessRate {
                    host: 60.5,
                    average: 95.9,
                    threshold: 80.2,
                },
                false,
            )),
            secs_since_last_action: Some(31),
            num_ejections: 2,
            ..eject
        };
        let v: serde_json::Value = serde_json::from_str(&render(&sr, at)).unwrap();
        assert_eq!(v["secs_since_last_action"], "31");
        assert_eq!(v["enforced"], false);
        assert_eq!(
            v["eject_success_rate_event"],
            serde_json::json!({
                "host_success_rate": 60,
                "cluster_average_success_rate": 95,
                "cluster_success_rate_ejection_threshold": 80,
            })
        );
        let un = Event { eject: None, ..sr };
        let line = render(&un, at);
        assert!(line.ends_with("}\n"));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["action"], "UNEJECT");
        assert_eq!(v["type"], "CONSECUTIVE_5XX");
        assert!(v.get("eject_consecutive_event").is_none());
    }
}
