//! In-memory entry points for the fuzz targets (`fuzz/`): courier's own
//! request handling without sockets. Not part of courier's interface.

use crate::codec::Codec;
use crate::filter_chain::HttpFilters;
use crate::request::conn::ConnInfo;
use crate::request::conn::{chain_at, next_connection_id};
use crate::request::phase::Phase;
use crate::stats::WorkerStats;
use crate::upstream::ClusterManager;
use crate::upstream::client::ClusterClient;
use arc_swap::ArcSwap;
use courier_config::snapshot::Snapshot;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// Most bytes of a response kept (a fuzz input cannot make courier answer more
/// than this legitimately; the rest is read and dropped).
const MAX_OUTPUT: usize = 1 << 20;

/// How long a connection whose client has sent everything and closed its
/// side may take to end.
pub const STALL: Duration = Duration::from_secs(10);

/// The connection did not end within [`STALL`] of its input ending.
#[derive(Debug)]
pub struct Stalled {
    /// What courier had written by then.
    pub output: Vec<u8>,
}

/// Serves bytes as one downstream HTTP/1.1 connection of the first listener of
/// a bootstrap: hyper's codec, courier's codec-error replies, the connection
/// manager (limits, sanitising, path normalisation, filters, routing, local
/// replies) and the router, over an in-memory stream. The client's side is
/// closed after the input, so every connection ends promptly; one still open
/// after [`STALL`] is reported.
#[doc(hidden)]
pub struct Http1Harness {
    runtime: tokio::runtime::Runtime,
    snapshot: Arc<ArcSwap<Snapshot>>,
    clusters: Arc<ClusterManager>,
    http_filters: Arc<HttpFilters>,
    shutdown: watch::Receiver<Phase>,
    _phase: watch::Sender<Phase>,
}

impl Http1Harness {
    /// Loads `yaml` (a bootstrap whose first listener has an HTTP connection
    /// manager; clusters it routes to should have no reachable endpoints).
    pub fn new(yaml: &str) -> Result<Self, String> {
        let bootstrap =
            courier_config::bootstrap_from_str(yaml, courier_config::load::Format::Yaml)
                .map_err(|e| e.to_string())?;
        crate::serve_check::check(&bootstrap).map_err(|p| p.join("; "))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let snapshot = Arc::new(ArcSwap::from_pointee(Snapshot::from_bootstrap(&bootstrap)));
        let clusters = Arc::new(ClusterManager::new(&snapshot.load())?);
        let http_filters = Arc::new(HttpFilters::build(
            &bootstrap,
            &ClusterClient::new(Arc::clone(&clusters)),
        )?);
        let (phase, shutdown) = watch::channel(Phase::Serving);
        Ok(Http1Harness {
            runtime,
            snapshot,
            clusters,
            http_filters,
            shutdown,
            _phase: phase,
        })
    }

    /// Feeds `input` to a new connection, closes the client's write side and
    /// returns everything courier wrote back until the connection ended.
    pub fn serve(&self, input: &[u8]) -> Result<Vec<u8>, Stalled> {
        let peer = SocketAddr::from(([192, 0, 2, 1], 40000));
        let local = SocketAddr::from(([127, 0, 0, 1], 10000));
        let listener = self
            .snapshot
            .load()
            .listeners
            .first()
            .cloned()
            .ok_or(Stalled { output: Vec::new() })?;
        let info = Arc::new(ConnInfo {
            listener,
            filter_chain_index: 0,
            peer: crate::request::conn::Peer::Ip(peer),
            local: crate::request::conn::Peer::Ip(local),
            tls: false,
            mtls: false,
            client_cert: None,
            facts: crate::filter_chain::conn_facts(peer, local, None, None),
            http_filters: self.http_filters.chain(0, 0),
            buffer_limit: self
                .snapshot
                .load()
                .listeners
                .first()
                .map_or(1 << 20, |l| u64::from(l.per_connection_buffer_limit_bytes)),
            server_name: None,
            fingerprints: None,
            id: next_connection_id(),
            wire: None,
        });
        let limits = {
            let snapshot = self.snapshot.load();
            let hcm = snapshot
                .listeners
                .first()
                .and_then(|l| chain_at(l, 0))
                .and_then(|fc| fc.hcm().map(|h| &**h));
            Arc::new(crate::codec::serve::Limits::of(hcm).with_half_close())
        };
        let conn = crate::codec::serve::Conn {
            info,
            codec: Codec::Http1,
            limits,
            snapshot: Arc::new(crate::request::snapshot::WorkerSnapshot::new(Arc::clone(
                &self.snapshot,
            ))),
            worker_stats: Arc::new(WorkerStats::default()),
            hcm_stats: Arc::default(),
            listener_drain: None,
            clusters: Arc::clone(&self.clusters),
            shutdown: self.shutdown.clone(),
        };
        self.runtime.block_on(async {
            let (client, server) = tokio::io::duplex(64 * 1024);
            let served = tokio::spawn(crate::codec::serve::serve(server, conn));
            let (mut rd, mut wr) = tokio::io::split(client);
            let writing = async move {
                // courier may close first (an early error reply): that ends writing.
                let _ = wr.write_all(input).await;
                let _ = wr.shutdown().await;
            };
            let mut out = Vec::new();
            let reading = async {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match rd.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            let keep = n.min(MAX_OUTPUT.saturating_sub(out.len()));
                            out.extend_from_slice(&buf[..keep]);
                        }
                    }
                }
            };
            let both = async { tokio::join!(writing, reading) };
            let ended = tokio::time::timeout(STALL, both).await.is_ok();
            served.abort();
            if ended {
                Ok(out)
            } else {
                Err(Stalled { output: out })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = include_str!("../../fuzz/http1.yaml");

    #[test]
    fn seeds_are_answered() {
        let h = Http1Harness::new(CONFIG).unwrap();
        let out = h.serve(b"GET /direct HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("direct"), "{text}");
        let out = h
            .serve(b"GET /up HTTP/1.1\r\nhost: a\r\n\r\nGET abc HTTP/1.1\r\n\r\n")
            .unwrap();
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(text.contains("HTTP/1.1 400"), "{text}");
        for seed in
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/http1")).unwrap()
        {
            let path = seed.unwrap().path();
            let out = h.serve(&std::fs::read(&path).unwrap()).unwrap();
            assert!(
                out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "),
                "{path:?}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}
