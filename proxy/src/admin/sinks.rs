//! Stats sinks (`stats_sinks`), flushed every `stats_flush_interval` on the main
//! thread as Envoy's flush does: every counter and gauge that has been used (see
//! [`Used`]) goes to each sink. `envoy.stat_sinks.statsd` sends one UDP datagram per
//! stat, `<prefix>.<name>:<delta>|c` for counters and `<prefix>.<name>:<value>|g`
//! for gauges; `envoy.stat_sinks.metrics_service` sends one `StreamMetricsMessage`
//! per flush on a long-lived `StreamMetrics` stream (the node's identifier in the
//! stream's first message), each stat a Prometheus `MetricFamily`;
//! `envoy.stat_sinks.open_telemetry` sends an OTLP export per flush
//! ([`super::otlp_sink`]). A sink that is down loses that flush; the stream is
//! opened again at the next one.
//!
//! The sinks get counters and gauges only: the histograms admin lists
//! (`downstream_rq_time`, ...) are not sent as the timers Envoy's send.

use crate::stats::Sample;
use crate::stats::prometheus::is_gauge;
use crate::upstream::ClusterManager;
use courier_config::stats::StatsConfig;
use courier_config::stats::sinks::StatsSink;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::metrics::v3 as pb;
use envoy_types::pb::io::prometheus::client as prom;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// Which stats have been used, and each counter's value at the last flush.
///
/// Envoy sends a stat once it has been touched (`used()`), zero or not; courier's
/// stats are plain numbers, so a counter counts as used from the first flush it
/// is non-zero on, and stays so, and a gauge always does (Envoy sets most of its
/// gauges when it creates them).
#[derive(Default)]
struct Used {
    last: HashMap<String, u64>,
}

impl Used {
    /// The stats to send this flush: (name, value, delta since the last flush,
    /// whether it is a gauge).
    fn take(&mut self, samples: &[Sample]) -> Vec<(String, u64, u64, bool)> {
        let mut out = Vec::with_capacity(samples.len());
        for (name, value) in samples {
            let gauge = is_gauge(name);
            let previous = self.last.get(name).copied();
            if previous.is_none() && *value == 0 && !gauge {
                continue;
            }
            self.last.insert(name.clone(), *value);
            // A counter reset by `/reset_counters` starts again from zero.
            let delta = value.saturating_sub(previous.unwrap_or(0));
            out.push((name.clone(), *value, delta, gauge));
        }
        out
    }
}

/// Starts the flush loop on the current (main) runtime. `samples` lists every
/// counter and gauge (admin's listing).
pub fn spawn(
    sinks: Vec<StatsSink>,
    interval: Duration,
    node: Node,
    clusters: Arc<ClusterManager>,
    stats_config: Arc<StatsConfig>,
    samples: impl Fn() -> Vec<Sample> + Send + 'static,
) {
    if sinks.is_empty() {
        return;
    }
    let start_ns = now_ns();
    tokio::spawn(async move {
        let mut used = Used::default();
        let client = crate::upstream::client::ClusterClient::new(Arc::clone(&clusters));
        let mut states: Vec<SinkState> = sinks
            .into_iter()
            .map(|s| SinkState::new(s, start_ns))
            .collect();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tick.tick().await;
            let stats = used.take(&samples());
            let now_ms = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let now = now_ns();
            for s in &mut states {
                if let SinkState::Otlp(o) = s {
                    let req = o.request(&stats, now, &stats_config);
                    o.send(&client, &req);
                    continue;
                }
                s.flush(&stats, now_ms, &node, &clusters).await;
            }
        }
    });
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A sink and what it keeps between flushes.
enum SinkState {
    Otlp(Box<super::otlp_sink::OtlpState>),
    Statsd {
        address: SocketAddr,
        prefix: String,
        socket: Option<tokio::net::UdpSocket>,
    },
    MetricsService {
        config: StatsSink,
        stream: Option<mpsc::Sender<pb::StreamMetricsMessage>>,
    },
}

impl SinkState {
    fn new(s: StatsSink, start_ns: u64) -> SinkState {
        match s {
            StatsSink::OpenTelemetry(o) => {
                SinkState::Otlp(Box::new(super::otlp_sink::OtlpState::new(o, start_ns)))
            }
            StatsSink::Statsd { address, prefix } => SinkState::Statsd {
                address,
                prefix,
                socket: None,
            },
            config @ StatsSink::MetricsService { .. } => SinkState::MetricsService {
                config,
                stream: None,
            },
        }
    }

    async fn flush(
        &mut self,
        stats: &[(String, u64, u64, bool)],
        now_ms: i64,
        node: &Node,
        clusters: &Arc<ClusterManager>,
    ) {
        match self {
            SinkState::Statsd {
                address,
                prefix,
                socket,
            } => {
                if socket.is_none() {
                    let local: SocketAddr = if address.is_ipv4() {
                        "0.0.0.0:0".parse().unwrap_or(*address)
                    } else {
                        "[::]:0".parse().unwrap_or(*address)
                    };
                    *socket = tokio::net::UdpSocket::bind(local).await.ok();
                }
                let Some(sock) = socket.as_ref() else { return };
                for (name, value, delta, gauge) in stats {
                    let line = if *gauge {
                        format!("{prefix}.{name}:{value}|g")
                    } else {
                        format!("{prefix}.{name}:{delta}|c")
                    };
                    // A lost datagram is statsd's way; an unreachable sink too.
                    let _ = sock.send_to(line.as_bytes(), *address).await;
                }
            }
            SinkState::Otlp(_) => {}
            SinkState::MetricsService { config, stream } => {
                let StatsSink::MetricsService {
                    counters_as_deltas, ..
                } = config
                else {
                    return;
                };
                let families = families(stats, now_ms, *counters_as_deltas);
                if let Some(tx) = stream.as_ref()
                    && !tx.is_closed()
                {
                    let msg = pb::StreamMetricsMessage {
                        identifier: None,
                        envoy_metrics: families,
                    };
                    if tx.try_send(msg).is_err() {
                        *stream = None;
                    }
                    return;
                }
                *stream = open(config, node, clusters, families);
            }
        }
    }
}

/// Each stat as a Prometheus family of one metric, named by its full name.
fn families(
    stats: &[(String, u64, u64, bool)],
    now_ms: i64,
    deltas: bool,
) -> Vec<prom::MetricFamily> {
    stats
        .iter()
        .map(|(name, value, delta, gauge)| {
            let mut m = prom::Metric {
                timestamp_ms: Some(now_ms),
                ..Default::default()
            };
            let kind = if *gauge {
                m.gauge = Some(prom::Gauge {
                    value: Some(*value as f64),
                });
                prom::MetricType::Gauge
            } else {
                m.counter = Some(prom::Counter {
                    value: Some(if deltas { *delta } else { *value } as f64),
                    ..Default::default()
                });
                prom::MetricType::Counter
            };
            prom::MetricFamily {
                name: Some(name.clone()),
                r#type: Some(kind as i32),
                metric: vec![m],
                ..Default::default()
            }
        })
        .collect()
}

/// Opens a `StreamMetrics` stream to the sink's cluster (in the background) and
/// queues its first message: the node's identifier and `first`.
fn open(
    config: &StatsSink,
    node: &Node,
    clusters: &Arc<ClusterManager>,
    first: Vec<prom::MetricFamily>,
) -> Option<mpsc::Sender<pb::StreamMetricsMessage>> {
    let StatsSink::MetricsService {
        cluster,
        initial_metadata,
        ..
    } = config
    else {
        return None;
    };
    let (tx, rx) = mpsc::channel(4);
    let msg = pb::StreamMetricsMessage {
        identifier: Some(pb::stream_metrics_message::Identifier {
            node: Some(node.clone()),
        }),
        envoy_metrics: first,
    };
    tx.try_send(msg).ok()?;
    let clusters = Arc::clone(clusters);
    let cluster = cluster.clone();
    let metadata = initial_metadata.clone();
    tokio::spawn(async move {
        let channel = match crate::xds::grpc_channel(&clusters, &cluster).await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%cluster, error = %e, "metrics service unreachable");
                return;
            }
        };
        let mut client = pb::metrics_service_client::MetricsServiceClient::new(channel);
        let req = crate::upstream::client::grpc_stream(rx, &metadata);
        // The stream lives until the service ends it or the sender is dropped.
        if let Err(e) = client.stream_metrics(req).await {
            tracing::debug!(%cluster, error = %e, "metrics service stream ended");
        }
    });
    Some(tx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_stats_and_counter_deltas() {
        let mut u = Used::default();
        let first = u.take(&[
            ("cluster.a.upstream_rq_total".into(), 0),
            ("cluster.a.upstream_cx_total".into(), 2),
            ("cluster.a.membership_total".into(), 1),
            ("cluster.a.upstream_cx_active".into(), 0),
        ]);
        assert_eq!(
            first,
            vec![
                ("cluster.a.upstream_cx_total".into(), 2, 2, false),
                ("cluster.a.membership_total".into(), 1, 1, true),
                ("cluster.a.upstream_cx_active".into(), 0, 0, true),
            ]
        );
        // Used stays used, at zero change too.
        let second = u.take(&[
            ("cluster.a.upstream_rq_total".into(), 3),
            ("cluster.a.upstream_cx_total".into(), 2),
            ("cluster.a.membership_total".into(), 0),
        ]);
        assert_eq!(
            second,
            vec![
                ("cluster.a.upstream_rq_total".into(), 3, 3, false),
                ("cluster.a.upstream_cx_total".into(), 2, 0, false),
                ("cluster.a.membership_total".into(), 0, 0, true),
            ]
        );
    }
}
