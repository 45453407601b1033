//! xDS at scale (issue 7): the time from a control plane's response of N
//! clusters (EDS) and their ClusterLoadAssignments to courier serving them, the
//! time for a Delta (or SotW) update of one endpoint, and courier's RSS growth
//! per cluster.
//!
//! Usage: `bench-xds-scale COURIER_BIN CLUSTERS ENDPOINTS_PER_CLUSTER DELTA(0|1) UPDATES`
//!
//! Runs an ADS server (tonic, in process), `ENDPOINTS_PER_CLUSTER` upstreams,
//! and courier (`--concurrency 2`) with a bootstrap of ADS + CDS over ADS and
//! one listener whose RDS route sends each request to the cluster its
//! `x-cluster` header names. Then:
//! 1. RSS before (no dynamic cluster).
//! 2. At t0 the control plane gets every cluster and assignment at once; the
//!    end is courier's ACK of the EDS response that completes them (courier
//!    ACKs after applying: the new cluster set is stored, so each worker uses it
//!    at its next request). A request to the last cluster then checks it is served.
//! 3. RSS after; growth per cluster.
//! 4. `UPDATES` times, one endpoint of one cluster changes; the time from the
//!    change to courier's ACK of it (main-thread decode and apply plus a
//!    loopback round trip).

use envoy_types::pb::envoy::config::cluster::v3::{Cluster, cluster};
use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ConfigSource, SocketAddress, address, config_source,
    socket_address,
};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route, route_action,
    route_match,
};
use envoy_types::pb::google::protobuf::Any;
use prost::{Message, Name};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[path = "xds_cp.rs"]
mod cp;
use cp::{Ack, Cp, Resources, nonce, serve_cp};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A keep-alive HTTP/1.1 upstream answering 200 `ok` to everything.
async fn upstream() -> Result<SocketAddr, Error> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while let Ok(n) = s.read(&mut chunk).await {
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let resp = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(resp).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok(addr)
}

/// The status of `GET /` with `x-cluster: cluster` on a new connection.
async fn status(addr: SocketAddr, cluster: &str) -> Result<u16, Error> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!(
        "GET / HTTP/1.1\r\nhost: bench\r\nx-cluster: {cluster}\r\nconnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await??;
    let head = String::from_utf8_lossy(&out);
    Ok(head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

fn any<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

fn sock(addr: SocketAddr) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: addr.ip().to_string(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                addr.port(),
            ))),
            ..Default::default()
        })),
    }
}

fn cla(name: &str, addrs: &[SocketAddr]) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: addrs
                .iter()
                .map(|a| LbEndpoint {
                    host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                        address: Some(sock(*a)),
                        ..Default::default()
                    })),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
            seconds: 1,
            nanos: 0,
        }),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::EdsClusterConfig {
            eds_config: Some(ConfigSource {
                config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                    AggregatedConfigSource {},
                )),
                resource_api_version: 2,
                ..Default::default()
            }),
            service_name: String::new(),
        }),
        ..Default::default()
    }
}

fn routes() -> RouteConfiguration {
    RouteConfiguration {
        name: "routes".into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                    ..Default::default()
                }),
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::ClusterHeader(
                        "x-cluster".into(),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn bootstrap(cp: SocketAddr, delta: bool) -> String {
    let api = if delta { "DELTA_GRPC" } else { "GRPC" };
    format!(
        r#"
node: {{id: bench, cluster: bench}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
dynamic_resources:
  cds_config: {{ads: {{}}, resource_api_version: V3}}
  ads_config:
    api_type: {api}
    transport_api_version: V3
    grpc_services:
    - envoy_grpc: {{cluster_name: xds}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          rds:
            route_config_name: routes
            config_source: {{ads: {{}}, resource_api_version: V3}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: xds
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: xds
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}
"#,
        port = cp.port()
    )
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Waits for an ACK of `nonce` (bounded).
async fn acked(acks: &mut mpsc::UnboundedReceiver<Ack>, want: &str) -> Result<Instant, Error> {
    let wait = async {
        while let Some((_, n)) = acks.recv().await {
            if n == want {
                return Some(Instant::now());
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await?
        .ok_or_else(|| format!("no ACK of {want}").into())
}

struct Courier(std::process::Child);

impl Drop for Courier {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "bench-xds-scale COURIER_BIN CLUSTERS ENDPOINTS_PER_CLUSTER DELTA(0|1) UPDATES";
    let [_, bin, n, m, delta, updates] = args.as_slice() else {
        return Err(usage.into());
    };
    let (n, m, delta, updates): (usize, usize, bool, usize) =
        (n.parse()?, m.parse()?, delta == "1", updates.parse()?);
    let mut ups = Vec::with_capacity(m);
    for _ in 0..m {
        ups.push(upstream().await?);
    }
    let (cla_url, cds_url, rds_url) = (
        ClusterLoadAssignment::type_url(),
        Cluster::type_url(),
        RouteConfiguration::type_url(),
    );
    let mut initial = Resources::new();
    initial
        .entry(rds_url.clone())
        .or_default()
        .insert("routes".into(), (1, any(&routes())));
    let (state, state_rx) = watch::channel((1u64, Arc::new(initial)));
    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let cp = serve_cp(Cp {
        state: state_rx,
        acks: ack_tx,
    })
    .await?;

    let dir = std::env::temp_dir().join(format!("bench-xds-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (config, admin_path) = (dir.join("courier.yaml"), dir.join("admin"));
    std::fs::write(&config, bootstrap(cp, delta))?;
    let child = std::process::Command::new(bin)
        .args(["--concurrency", "2", "-l", "warning", "-c"])
        .arg(&config)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .spawn()?;
    let courier = Courier(child);
    let pid = courier.0.id();
    acked(&mut acks, &nonce(1, &rds_url)).await?;
    let admin: SocketAddr = std::fs::read_to_string(&admin_path)?.trim().parse()?;
    let listeners = {
        let mut s = TcpStream::connect(admin).await?;
        s.write_all(b"GET /listeners HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        out
    };
    let listener: SocketAddr = listeners
        .lines()
        .find_map(|l| l.strip_prefix("ingress::"))
        .ok_or("no ingress listener")?
        .trim()
        .parse()?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_kib(pid);

    // Every cluster and assignment at once.
    let mut next = Resources::clone(&state.borrow().1);
    let v = 2;
    for i in 0..n {
        let name = format!("c{i}");
        next.entry(cds_url.clone())
            .or_default()
            .insert(name.clone(), (v, any(&eds_cluster(&name))));
        next.entry(cla_url.clone())
            .or_default()
            .insert(name.clone(), (v, any(&cla(&name, &ups))));
    }
    let next = Arc::new(next);
    let t0 = Instant::now();
    state.send_replace((v, Arc::clone(&next)));
    let cds_done = acked(&mut acks, &nonce(v, &cds_url)).await?;
    let eds_done = acked(&mut acks, &nonce(v, &cla_url)).await?;
    let last = format!("c{}", n - 1);
    let served = status(listener, &last).await?;
    println!(
        "push: {n} clusters x {m} endpoints ({}): CDS applied in {:.1} ms, all served (EDS ACK) in {:.1} ms; GET to {last}: {served}",
        if delta { "Delta" } else { "SotW" },
        (cds_done - t0).as_secs_f64() * 1e3,
        (eds_done - t0).as_secs_f64() * 1e3,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = rss_kib(pid);
    let growth = rss_after.saturating_sub(rss_before) as f64 * 1024.0;
    println!(
        "rss: before {rss_before} KiB, after {rss_after} KiB: {:.0} B per cluster with its {m} endpoints (target {} B)",
        growth / n as f64,
        3 * 1024 + 200 * m
    );

    // One endpoint of one cluster changes, `updates` times.
    let target = format!("c{}", n / 2);
    let mut times = Vec::with_capacity(updates);
    let mut current = next;
    for k in 0..updates {
        let v = 3 + k as u64;
        let mut addrs = ups.clone();
        if let Some(first) = addrs.first_mut() {
            // Alternate the first endpoint between two loopback addresses.
            let ip = if k % 2 == 0 {
                [127, 0, 0, 2]
            } else {
                [127, 0, 0, 1]
            };
            *first = SocketAddr::from((ip, first.port()));
        }
        let mut r = Resources::clone(&current);
        r.entry(cla_url.clone())
            .or_default()
            .insert(target.clone(), (v, any(&cla(&target, &addrs))));
        current = Arc::new(r);
        let t0 = Instant::now();
        state.send_replace((v, Arc::clone(&current)));
        let done = acked(&mut acks, &nonce(v, &cla_url)).await?;
        times.push((done - t0).as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    if !times.is_empty() {
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
        println!(
            "one-endpoint update ({}): {updates} updates, ACK after median {:.3} ms, p90 {:.3} ms, max {:.3} ms",
            if delta {
                "Delta: that CLA alone"
            } else {
                "SotW: every CLA resent"
            },
            at(0.5),
            at(0.9),
            at(1.0)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
