//! The active health checker's event log (`HealthCheck.event_logger` file sinks
//! and `event_log_path`): one JSON line per event, shaped as Envoy's
//! `envoy.data.core.v3.HealthCheckEvent` in proto3 JSON with default values
//! printed, field for field in the proto's order, so tools that read Envoy's log
//! read courier's.

use courier_config::cluster::Locality;
use courier_config::core::MetadataMap;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::time::SystemTime;

/// The files one health check's events go to. Only the main thread writes (the
/// checks run there); each event is one `write` of a whole line per file, opened
/// for appending.
#[derive(Debug)]
pub struct HealthEventLog {
    files: Vec<File>,
}

/// Why a check failed (`HealthCheckFailureType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureType {
    /// The host answered, wrongly (status, payload, gRPC status).
    Active,
    /// No usable answer: connect failure, reset, timeout.
    Network,
}

/// What happened (the event's oneof).
#[derive(Debug, Clone, Copy)]
pub enum What {
    /// The host turned unhealthy.
    Eject {
        /// Why its last check failed.
        failure: FailureType,
        /// The HTTP status of that check (0: none).
        status: u16,
    },
    /// The host turned healthy; `first_check`: on its first check.
    AddHealthy {
        /// The host's first check.
        first_check: bool,
    },
    /// A check failed.
    Failure {
        /// Why.
        failure: FailureType,
        /// The host's first check.
        first_check: bool,
        /// The HTTP status of the check (0: none).
        status: u16,
    },
    /// A check passed (and changed nothing).
    Success,
}

/// One event.
#[derive(Debug)]
pub struct Event<'a> {
    /// `HTTP`, `TCP` or `GRPC`.
    pub checker: &'static str,
    /// The host's address.
    pub host: SocketAddr,
    /// The cluster's name.
    pub cluster: &'a str,
    /// The host's endpoint metadata (printed when it has some).
    pub metadata: Option<&'a MetadataMap>,
    /// The host's locality (empty when it has none).
    pub locality: Option<&'a Locality>,
    /// What happened.
    pub what: What,
}

impl HealthEventLog {
    /// Opens (creating, appending) each of `paths`; `None` when there is none.
    pub fn open(paths: &[String]) -> Result<Option<Self>, String> {
        if paths.is_empty() {
            return Ok(None);
        }
        let files = paths
            .iter()
            .map(|p| {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("health check event log {p}: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Self { files }))
    }

    /// Appends `event` to every file. A failed write is reported in the process
    /// log only: an event log must not stop health checking.
    pub fn write(&self, event: &Event<'_>) {
        let line = render(event, SystemTime::now());
        for mut f in &self.files {
            if let Err(e) = f.write_all(line.as_bytes()) {
                tracing::warn!(error = %e, "health check event log: write failed");
            }
        }
    }
}

fn failure_name(f: FailureType) -> &'static str {
    match f {
        FailureType::Active => "ACTIVE",
        FailureType::Network => "NETWORK",
    }
}

/// One line, fields in the proto's declaration order as Envoy's printer writes them.
fn render(event: &Event<'_>, now: SystemTime) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let mut line = format!(
        "{{\"health_checker_type\":\"{}\",\"host\":{{\"socket_address\":{{\"protocol\":\"TCP\",\
         \"address\":{},\"port_value\":{},\"resolver_name\":\"\",\"ipv4_compat\":false,\
         \"network_namespace_filepath\":\"\"}}}},\"cluster_name\":{}",
        event.checker,
        text(&event.host.ip().to_string()),
        event.host.port(),
        text(event.cluster),
    );
    match event.what {
        What::Eject { failure, status } => {
            let _ = write!(
                line,
                ",\"eject_unhealthy_event\":{{\"failure_type\":\"{}\",\"http_status_code\":{status}}}",
                failure_name(failure)
            );
        }
        What::AddHealthy { first_check } => {
            let _ = write!(
                line,
                ",\"add_healthy_event\":{{\"first_check\":{first_check}}}"
            );
        }
        What::Failure { .. } | What::Success => {}
    }
    line.push_str(",\"timestamp\":\"");
    crate::log_time::default_format(now, &mut line);
    line.push('"');
    if let What::Failure {
        failure,
        first_check,
        status,
    } = event.what
    {
        let _ = write!(
            line,
            ",\"health_check_failure_event\":{{\"failure_type\":\"{}\",\"first_check\":{first_check},\
             \"http_status_code\":{status}}}",
            failure_name(failure)
        );
    }
    if let Some(m) = event.metadata.filter(|m| !m.is_empty()) {
        let filter = proto_json(&serde_json::to_value(m).unwrap_or_default()).to_string();
        let _ = write!(
            line,
            ",\"metadata\":{{\"filter_metadata\":{filter},\"typed_filter_metadata\":{{}}}}"
        );
    }
    let empty = Locality::default();
    let l = event.locality.unwrap_or(&empty);
    let _ = write!(
        line,
        ",\"locality\":{{\"region\":{},\"zone\":{},\"sub_zone\":{}}}",
        text(&l.region),
        text(&l.zone),
        text(&l.sub_zone)
    );
    if matches!(event.what, What::Success) {
        line.push_str(",\"successful_health_check_event\":{}");
    }
    line.push_str("}\n");
    line
}

/// `v` as protobuf's JSON printer writes a `Struct`: its numbers are doubles, and
/// an integral one prints without a fraction (`1`, not `1.0`).
fn proto_json(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(proto_json).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), proto_json(v))).collect())
        }
        _ => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn event(what: What) -> String {
        let mut meta = MetadataMap::new();
        meta.insert(
            "x".into(),
            serde_json::json!({"k": "v", "n": 1.0, "f": 0.5})
                .as_object()
                .unwrap()
                .clone(),
        );
        let loc = Locality {
            region: "r1".into(),
            zone: "z1".into(),
            sub_zone: String::new(),
        };
        let e = Event {
            checker: "HTTP",
            host: "127.0.0.1:43911".parse().unwrap(),
            cluster: "c",
            metadata: Some(&meta),
            locality: Some(&loc),
            what,
        };
        // 2026-12-04T21:00:58.032Z
        render(
            &e,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_418_058_032),
        )
    }

    /// Lines real Envoy 1.40 wrote for these events (its event file sink), byte for
    /// byte (the metadata given two more numbers, printed as protobuf prints them).
    #[test]
    fn lines_are_envoys() {
        let host = r#""health_checker_type":"HTTP","host":{"socket_address":{"protocol":"TCP","address":"127.0.0.1","port_value":43911,"resolver_name":"","ipv4_compat":false,"network_namespace_filepath":""}},"cluster_name":"c""#;
        let tail = r#""metadata":{"filter_metadata":{"x":{"f":0.5,"k":"v","n":1}},"typed_filter_metadata":{}},"locality":{"region":"r1","zone":"z1","sub_zone":""}"#;
        let ts = r#""timestamp":"2026-12-04T21:00:58.032Z""#;
        assert_eq!(
            event(What::Failure {
                failure: FailureType::Active,
                first_check: true,
                status: 503
            }),
            format!(
                "{{{host},{ts},\"health_check_failure_event\":{{\"failure_type\":\"ACTIVE\",\"first_check\":true,\"http_status_code\":503}},{tail}}}\n"
            )
        );
        assert_eq!(
            event(What::Success),
            format!("{{{host},{ts},{tail},\"successful_health_check_event\":{{}}}}\n")
        );
        assert_eq!(
            event(What::AddHealthy { first_check: false }),
            format!("{{{host},\"add_healthy_event\":{{\"first_check\":false}},{ts},{tail}}}\n")
        );
        assert_eq!(
            event(What::Eject {
                failure: FailureType::Network,
                status: 0
            }),
            format!(
                "{{{host},\"eject_unhealthy_event\":{{\"failure_type\":\"NETWORK\",\"http_status_code\":0}},{ts},{tail}}}\n"
            )
        );
    }
}
