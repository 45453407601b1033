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

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Name;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[path = "xds_cp.rs"]
mod cp;
use cp::{Cp, Resources, nonce, serve_cp};

#[path = "xds_common.rs"]
mod common;
use common::{
    Courier, Error, acked, any, bootstrap, cla, eds_cluster, listener, routes, rss_kib, status,
    upstream,
};

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
    let listener = listener(admin, "ingress").await?;
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
