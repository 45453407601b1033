//! xDS churn under load (issue 7): latency and errors of steady keep-alive
//! traffic through courier while a control plane pushes config updates, against
//! the same traffic without updates.
//!
//! Usage: `bench-xds-churn COURIER_BIN SECONDS UPDATES_PER_SECOND CONNECTIONS DELTA(0|1)`
//!
//! Runs an ADS server (tonic, in process), two keep-alive upstreams and courier
//! (`--concurrency 2`, CDS + EDS + RDS over ADS). `CONNECTIONS` closed-loop
//! HTTP/1.1 clients send `GET /` (routed to cluster `c0` by `x-cluster`) for
//! `SECONDS` without updates, then for `SECONDS` while the control plane pushes
//! `UPDATES_PER_SECOND` updates, rotating through: the endpoints of `c0` (one
//! upstream or the other), the route configuration (a response header's value),
//! and cluster `c0` itself (its connect timeout). Over SotW every update resends
//! each type's whole set; over Delta only the changed resource goes out. Prints requests/s and
//! p50/p99/p99.9 latency of both phases, and exits non-zero on any non-2xx
//! response or connection error.
//!
//! `KINDS` (digits of 0 endpoints, 1 routes, 2 cluster; default `012`) limits
//! the rotation to those kinds. With `RATE=N` in the environment the clients send N requests a second in all
//! (each on its own schedule) instead of back to back, so the tail shows what
//! the updates cost rather than a saturated machine's scheduling. A latency
//! runs from the send (tokio's timers wake up to a millisecond late: timing
//! from when a request was due would measure them).

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Name;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;

#[path = "xds_cp.rs"]
mod cp;
use cp::{Cp, Resources, nonce, serve_cp};

#[path = "xds_common.rs"]
mod common;
use common::{Courier, Error, acked, any, bootstrap, cla, eds_cluster, listener, routes, upstream};

/// What one phase measured.
#[derive(Default)]
struct Phase {
    /// Latencies in microseconds.
    latencies: Vec<u32>,
    non_2xx: u64,
    /// The first non-2xx status seen, with its response head.
    first_bad: Option<String>,
    errors: u64,
}

/// One closed-loop client on a keep-alive connection until `stop`; reconnects
/// after an error (counted).
async fn client(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    pace: Option<Duration>,
    offset: f64,
) -> Phase {
    let mut out = Phase::default();
    let req = b"GET / HTTP/1.1\r\nhost: bench\r\nx-cluster: c0\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    // Paced: when the next request is due (the clients' starts spread over one period).
    let mut due = pace.map(|p| Instant::now() + p.mul_f64(offset));
    // Bounded: the phase ends by `stop`; this caps a runaway loop.
    'conn: for _ in 0..1_000 {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            out.errors += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = s.set_nodelay(true);
        while !stop.load(Ordering::Relaxed) {
            if let (Some(at), Some(p)) = (&mut due, pace) {
                tokio::time::sleep_until(*at).await;
                *at += p;
            }
            let t0 = Instant::now();
            if s.write_all(req).await.is_err() {
                out.errors += 1;
                continue 'conn;
            }
            // The upstreams answer with a fixed content-length: read to the end
            // of the body.
            let mut have = 0;
            let status = loop {
                match s.read(&mut buf[have..]).await {
                    Ok(0) | Err(_) => {
                        out.errors += 1;
                        continue 'conn;
                    }
                    Ok(n) => have += n,
                }
                let text = &buf[..have];
                if let Some(end) = text.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&text[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if have >= end + 4 + len {
                        break head
                            .split(' ')
                            .nth(1)
                            .and_then(|c| c.parse::<u16>().ok())
                            .unwrap_or(0);
                    }
                }
                if have == buf.len() {
                    buf.resize(buf.len() * 2, 0);
                }
            };
            out.latencies
                .push(t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
            if !(200..300).contains(&status) {
                out.non_2xx += 1;
                if out.first_bad.is_none() {
                    out.first_bad = Some(String::from_utf8_lossy(&buf[..have]).into_owned());
                }
            }
        }
        return out;
    }
    out
}

/// Runs `connections` clients for `seconds`.
async fn load(addr: SocketAddr, connections: usize, seconds: u64) -> Phase {
    let stop = Arc::new(AtomicBool::new(false));
    // `RATE` requests a second in all: each client one every connections / RATE s.
    let pace = std::env::var("RATE")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(connections as f64 / r));
    let tasks: Vec<_> = (0..connections)
        .map(|i| {
            let offset = i as f64 / connections as f64;
            tokio::spawn(client(addr, Arc::clone(&stop), pace, offset))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Phase::default();
    for t in tasks {
        if let Ok(p) = t.await {
            all.latencies.extend(p.latencies);
            all.non_2xx += p.non_2xx;
            all.errors += p.errors;
            all.first_bad = all.first_bad.or(p.first_bad);
        }
    }
    all.latencies.sort_unstable();
    all
}

fn report(name: &str, p: &Phase, seconds: u64) -> f64 {
    let at = |q: f64| {
        p.latencies
            .get(((p.latencies.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |us| f64::from(*us) / 1000.0)
    };
    println!(
        "{name}: {} requests ({:.0}/s), latency p50 {:.3} ms, p99 {:.3} ms, p99.9 {:.3} ms; non-2xx {}, connection errors {}",
        p.latencies.len(),
        p.latencies.len() as f64 / seconds as f64,
        at(0.5),
        at(0.99),
        at(0.999),
        p.non_2xx,
        p.errors
    );
    if let Some(bad) = &p.first_bad {
        println!("  first non-2xx response:\n{bad}");
    }
    at(0.99)
}

/// The route configuration of generation `g`: every response says `x-gen: g`.
fn routes_gen(g: u64) -> RouteConfiguration {
    let mut rc = routes();
    if let Some(vh) = rc.virtual_hosts.first_mut() {
        vh.response_headers_to_add = vec![HeaderValueOption {
            header: Some(HeaderValue {
                key: "x-gen".into(),
                value: g.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }];
    }
    rc
}

/// Cluster `c0` of generation `g`: its connect timeout alternates (an update
/// of a cluster in force that keeps its endpoints).
fn cluster_gen(g: u64) -> Cluster {
    let mut c = eds_cluster("c0");
    c.connect_timeout = Some(envoy_types::pb::google::protobuf::Duration {
        seconds: 1 + (g % 2) as i64,
        nanos: 0,
    });
    c
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "bench-xds-churn COURIER_BIN SECONDS UPDATES_PER_SECOND CONNECTIONS DELTA(0|1)";
    let [_, bin, seconds, rate, connections, delta] = args.as_slice() else {
        return Err(usage.into());
    };
    let (seconds, rate, connections, delta): (u64, u64, usize, bool) = (
        seconds.parse()?,
        rate.parse()?,
        connections.parse()?,
        delta == "1",
    );
    let ups = [upstream().await?, upstream().await?];
    let (cla_url, cds_url, rds_url) = (
        ClusterLoadAssignment::type_url(),
        Cluster::type_url(),
        RouteConfiguration::type_url(),
    );
    let mut initial = Resources::new();
    initial
        .entry(rds_url.clone())
        .or_default()
        .insert("routes".into(), (1, any(&routes_gen(1))));
    initial
        .entry(cds_url.clone())
        .or_default()
        .insert("c0".into(), (1, any(&cluster_gen(1))));
    initial
        .entry(cla_url.clone())
        .or_default()
        .insert("c0".into(), (1, any(&cla("c0", &ups[..1]))));
    let (state, state_rx) = watch::channel((1u64, Arc::new(initial)));
    let (ack_tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let cp = serve_cp(Cp {
        state: state_rx,
        acks: ack_tx,
    })
    .await?;

    let dir = std::env::temp_dir().join(format!("bench-xds-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (config, admin_path) = (dir.join("courier.yaml"), dir.join("admin"));
    std::fs::write(&config, bootstrap(cp, delta))?;
    let child = std::process::Command::new(bin)
        .args(["--concurrency", "2", "-l", "warning", "-c"])
        .arg(&config)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .spawn()?;
    let _courier = Courier(child);
    acked(&mut acks, &nonce(1, &cla_url)).await?;
    let admin: SocketAddr = std::fs::read_to_string(&admin_path)?.trim().parse()?;
    let addr = listener(admin, "ingress").await?;
    // Warm-up: connections and pools.
    let _ = load(addr, connections, 1).await;

    let quiet = load(addr, connections, seconds).await;

    // The updates run beside the second phase, `rate` per second, bounded by count.
    let pushed = Arc::new(AtomicU64::new(0));
    let pusher = {
        let pushed = Arc::clone(&pushed);
        let (cla_url, cds_url, rds_url) = (cla_url.clone(), cds_url.clone(), rds_url.clone());
        tokio::spawn(async move {
            let every = Duration::from_micros(1_000_000 / rate.max(1));
            let mut tick = tokio::time::interval(every);
            let mut current = Arc::clone(&state.borrow().1);
            // `KINDS` (e.g. `02`): only these of 0 endpoints, 1 routes, 2 cluster.
            let kinds: Vec<u64> = std::env::var("KINDS")
                .unwrap_or_else(|_| "012".into())
                .chars()
                .filter_map(|c| c.to_digit(10).map(u64::from))
                .filter(|k| *k < 3)
                .collect();
            let kinds = if kinds.is_empty() {
                vec![0, 1, 2]
            } else {
                kinds
            };
            for k in 0..rate * seconds {
                tick.tick().await;
                let v = 2 + k;
                let mut r = Resources::clone(&current);
                let kind = kinds[(k % kinds.len() as u64) as usize];
                let k = k / kinds.len() as u64 * 3 + kind;
                match k % 3 {
                    0 => {
                        let up = &ups[(k / 3 % 2) as usize..][..1];
                        r.entry(cla_url.clone())
                            .or_default()
                            .insert("c0".into(), (v, any(&cla("c0", up))));
                    }
                    1 => {
                        r.entry(rds_url.clone())
                            .or_default()
                            .insert("routes".into(), (v, any(&routes_gen(v))));
                    }
                    _ => {
                        r.entry(cds_url.clone())
                            .or_default()
                            .insert("c0".into(), (v, any(&cluster_gen(v))));
                    }
                }
                current = Arc::new(r);
                state.send_replace((v, Arc::clone(&current)));
                pushed.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let churn = load(addr, connections, seconds).await;
    let _ = pusher.await;
    // Every pushed update was applied: count the ACKs seen meanwhile.
    let mut acked_n = 0;
    while acks.try_recv().is_ok() {
        acked_n += 1;
    }

    println!(
        "xds churn ({}): {connections} connections, courier --concurrency 2, {seconds} s per phase, {} updates pushed ({rate}/s), {acked_n} ACKs",
        if delta { "Delta" } else { "SotW" },
        pushed.load(Ordering::Relaxed)
    );
    let p99_quiet = report("without updates", &quiet, seconds);
    let p99_churn = report("with updates   ", &churn, seconds);
    if p99_quiet > 0.0 {
        println!(
            "p99 with updates / without: {:.2}x (target <= 1.10x)",
            p99_churn / p99_quiet
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let failed = quiet.non_2xx + quiet.errors + churn.non_2xx + churn.errors;
    if failed > 0 {
        return Err(format!("{failed} non-2xx responses or connection errors").into());
    }
    Ok(())
}
