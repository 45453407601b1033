//! Histograms beside real Envoy: one bootstrap with
//! `stats_config.histogram_bucket_settings` (bounds given out of order, the
//! first matching rule winning) and clusters with
//! `track_cluster_stats.request_response_sizes`, a loopback upstream that
//! answers `/n/<len>` with a known head and a body of `<len>` bytes, and a
//! known set of requests (bodies and padding headers of known sizes).
//!
//! The size histograms (`upstream_{rq,rs}_{headers,body}_size`,
//! `upstream_{rq,rs}_headers_count`) are deterministic: their Prometheus
//! bucket counts, sums and counts, and their `/stats` text and JSON
//! quantiles, must be Envoy's exactly. The time histograms
//! (`downstream_rq_time`, `downstream_cx_length_ms` of the connection
//! manager and the listener, `upstream_rq_time`, `external.upstream_rq_time`,
//! `upstream_cx_connect_ms`, `upstream_cx_length_ms`) must have Envoy's TYPE lines, names, labels,
//! bucket bounds and counts. `?usedonly` must drop the same histograms. Envoy
//! shows histograms at its stats flush: the bootstrap flushes every 100 ms
//! and the test polls.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=$PWD/.venv/bin/envoy cargo test -p courier-tests --test histograms_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener, indent, loopback_cluster};
use courier_tests::proxies::{Kind, Proxy, poll};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// An upstream answering `/n/<len>` (any method) with 200, `x-up: abc` and a
/// body of `<len>` bytes, reading (and dropping) the request's body.
fn sized_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || serve(conn));
        }
    });
    addr
}

fn serve(conn: TcpStream) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let n: usize = path.rsplit('/').next().unwrap_or("0").parse().unwrap_or(0);
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {n}\r\nx-up: abc\r\n\r\n");
        if w.write_all(head.as_bytes()).is_err() || w.write_all(&vec![b'z'; n]).is_err() {
            return;
        }
    }
}

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/plain/" }
    route: { cluster: plain }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn yaml(up: SocketAddr) -> String {
    let sizes = "  track_cluster_stats: { request_response_sizes: true }\n";
    let clusters = [
        loopback_cluster("up", up.port(), sizes),
        loopback_cluster("plain", up.port(), ""),
        // Never used: its histograms exist, unused.
        loopback_cluster("idle", up.port(), sizes),
    ]
    .join("\n");
    format!(
        "stats_flush_interval: 0.1s\n\
         stats_config:\n  histogram_bucket_settings:\n\
         \x20 - match: {{ suffix: _size }}\n    buckets: [100, 10, 5000, 1000]\n\
         \x20 - match: {{ prefix: http. }}\n    buckets: [1, 2.5, 60000]\n\
         \x20 - match: {{ suffix: upstream_rq_time }}\n    buckets: [50, 5]\n\
         {}  clusters:\n{}\n",
        bootstrap(&[hcm_listener("in", "", VHOSTS)]),
        indent(&clusters, 2)
    )
}

/// (method, path, body bytes, padding header bytes).
const REQUESTS: [(&str, &str, usize, usize); 6] = [
    ("GET", "/n/0", 0, 0),
    ("GET", "/n/5", 0, 0),
    ("POST", "/n/1005", 1000, 0),
    ("POST", "/n/99", 120, 300),
    ("GET", "/n/10", 0, 50),
    ("GET", "/plain/n/3", 0, 0),
];

/// The histogram families compared; the size ones to the digit.
const SIZE_FAMILIES: [&str; 6] = [
    "envoy_cluster_upstream_rq_body_size",
    "envoy_cluster_upstream_rq_headers_count",
    "envoy_cluster_upstream_rq_headers_size",
    "envoy_cluster_upstream_rs_body_size",
    "envoy_cluster_upstream_rs_headers_count",
    "envoy_cluster_upstream_rs_headers_size",
];
const TIME_FAMILIES: [&str; 7] = [
    "envoy_cluster_external_upstream_rq_time",
    "envoy_cluster_upstream_cx_connect_ms",
    "envoy_cluster_upstream_cx_length_ms",
    "envoy_cluster_upstream_rq_time",
    "envoy_http_downstream_cx_length_ms",
    "envoy_http_downstream_rq_time",
    "envoy_listener_downstream_cx_length_ms",
];

/// The lines of `family` in a Prometheus text, in order.
fn family_lines<'a>(prom: &'a str, family: &str) -> Vec<&'a str> {
    let type_line = format!("# TYPE {family} ");
    let series = [
        format!("{family}_bucket{{"),
        format!("{family}_sum{{"),
        format!("{family}_count{{"),
    ];
    prom.lines()
        .filter(|l| l.starts_with(&type_line) || series.iter().any(|s| l.starts_with(s.as_str())))
        .collect()
}

/// A time histogram's lines as compared: bucket values and the sum dropped.
fn time_shape(line: &str) -> String {
    if line.contains("_bucket{") {
        line.rsplit_once(' ')
            .map_or(line, |(head, _)| head)
            .to_string()
    } else if line.contains("_sum{") {
        line.rsplit_once(' ')
            .map_or(line, |(head, _)| head)
            .to_string()
            + " <sum>"
    } else {
        line.to_string()
    }
}

struct Seen {
    /// The size families' Prometheus lines, exactly.
    sizes: Vec<String>,
    /// The time families' Prometheus lines, shaped.
    times: Vec<String>,
    /// The size histograms' `/stats` text lines.
    text: Vec<String>,
    /// The size histograms' JSON quantiles.
    json: Vec<serde_json::Value>,
    /// The histogram series `?usedonly` lists among the compared families.
    used_only: Vec<String>,
}

const FILTER: &str =
    "filter=%5E(cluster%5C.(up%7Cplain%7Cidle)%5C.%7Chttp%5C.in%5C.%7Clistener%5C.127)";

fn run(kind: Kind, bin: &std::path::Path, up: SocketAddr) -> Seen {
    let p = Proxy::start(kind, bin, &yaml(up), &["in"]).unwrap();
    let addr = p.listener("in").unwrap().to_string();
    for (method, path, body, pad) in REQUESTS {
        let mut headers = Vec::new();
        if pad > 0 {
            headers.push(("x-pad".to_string(), "p".repeat(pad)));
        }
        let r = client::send(
            &addr,
            Protocol::Http1,
            &Request {
                method: method.into(),
                path: path.into(),
                authority: "example.com".into(),
                headers,
                body: vec![b'b'; body],
            },
        )
        .unwrap();
        assert_eq!(r.status, 200, "{kind} {path}");
    }
    let get = |path: &str| {
        String::from_utf8_lossy(&client::get(&p.admin, path).unwrap().body).to_string()
    };
    // Envoy shows what it recorded at its next stats flush; its interval
    // quantiles are `nan` once a flush interval passed with no values.
    let settled = poll(500, || {
        let prom = get(&format!("/stats/prometheus?{FILTER}"));
        let text = get(&format!("/stats?{FILTER}"));
        let done = prom
            .contains("envoy_cluster_upstream_rs_body_size_count{envoy_cluster_name=\"up\"} 5")
            && prom.contains(
                "envoy_http_downstream_rq_time_count{envoy_http_conn_manager_prefix=\"in\"} 6",
            )
            // Each request came on a connection of its own, closed after it.
            && prom.contains(
                "envoy_http_downstream_cx_length_ms_count{envoy_http_conn_manager_prefix=\"in\"} 6",
            )
            && text.contains("cluster.up.upstream_rs_body_size: P0(nan,");
        done.then_some((prom, text))
    });
    let (prom, text) = settled.unwrap_or_else(|| {
        panic!(
            "{kind}: histograms never settled:\n{}",
            get(&format!("/stats/prometheus?{FILTER}"))
        )
    });
    if std::env::var_os("HIST_DEBUG").is_some() {
        eprintln!("{kind}:\n{prom}");
    }
    let sizes = SIZE_FAMILIES
        .iter()
        .flat_map(|f| family_lines(&prom, f))
        .map(String::from)
        .collect();
    let times = TIME_FAMILIES
        .iter()
        .flat_map(|f| family_lines(&prom, f))
        .map(time_shape)
        .collect();
    let text = text
        .lines()
        .filter(|l| l.contains("_size: ") || l.contains("_headers_count: "))
        .map(String::from)
        .collect();
    let doc: serde_json::Value =
        serde_json::from_str(&get(&format!("/stats?format=json&{FILTER}"))).unwrap();
    let json = doc["stats"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["histograms"]["computed_quantiles"].as_array())
        .flatten()
        .filter(|h| {
            let name = h["name"].as_str().unwrap_or("");
            name.ends_with("_size") || name.ends_with("_headers_count")
        })
        .cloned()
        .collect();
    let used = get(&format!("/stats/prometheus?usedonly&{FILTER}"));
    let used_only = SIZE_FAMILIES
        .iter()
        .chain(&TIME_FAMILIES)
        .flat_map(|f| family_lines(&used, f))
        .filter(|l| l.contains("_count{"))
        .map(|l| l.rsplit_once(' ').map_or(l, |(h, _)| h).to_string())
        .collect();
    Seen {
        sizes,
        times,
        text,
        json,
        used_only,
    }
}

#[test]
fn histograms_as_envoy() {
    let up = sized_upstream();
    let courier = run(Kind::Courier, &courier_bin(), up);
    // courier's own expectations, whether or not Envoy is installed.
    let has = |lines: &[String], want: &str| {
        assert!(
            lines.iter().any(|l| l == want),
            "{want} missing in {lines:#?}"
        );
    };
    // Request bodies 0, 0, 1000, 120, 0; bounds sorted; a value at a bound
    // is in its bucket.
    for (le, n) in [("10", 3), ("100", 3), ("1000", 5), ("5000", 5), ("+Inf", 5)] {
        has(
            &courier.sizes,
            &format!(
                "envoy_cluster_upstream_rq_body_size_bucket{{envoy_cluster_name=\"up\",le=\"{le}\"}} {n}"
            ),
        );
    }
    // Response bodies 0, 5, 1005, 99, 10: 1005 is in 1000's bin.
    for (le, n) in [("10", 3), ("100", 4), ("1000", 5)] {
        has(
            &courier.sizes,
            &format!(
                "envoy_cluster_upstream_rs_body_size_bucket{{envoy_cluster_name=\"up\",le=\"{le}\"}} {n}"
            ),
        );
    }
    has(
        &courier.sizes,
        "envoy_cluster_upstream_rs_headers_count_count{envoy_cluster_name=\"up\"} 5",
    );
    // The unused tracked cluster lists its size histograms; the untracked one none.
    has(
        &courier.sizes,
        "envoy_cluster_upstream_rq_body_size_count{envoy_cluster_name=\"idle\"} 0",
    );
    assert!(!courier.sizes.iter().any(|l| l.contains("\"plain\"")));
    // Time histograms: the first matching rule's bounds.
    for line in [
        "envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=\"up\",le=\"5\"}",
        "envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=\"up\",le=\"50\"}",
        "envoy_cluster_upstream_rq_time_count{envoy_cluster_name=\"up\"} 5",
        "envoy_cluster_upstream_rq_time_count{envoy_cluster_name=\"plain\"} 1",
        "envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix=\"in\",le=\"2.5\"}",
        "envoy_http_downstream_rq_time_count{envoy_http_conn_manager_prefix=\"in\"} 6",
        "envoy_cluster_upstream_cx_connect_ms_bucket{envoy_cluster_name=\"up\",le=\"3600000\"}",
        "envoy_cluster_upstream_cx_length_ms_count{envoy_cluster_name=\"up\"} 0",
        "envoy_http_downstream_cx_length_ms_count{envoy_http_conn_manager_prefix=\"in\"} 6",
        "envoy_listener_downstream_cx_length_ms_count{envoy_listener_address=\"127.0.0.1_0\"} 6",
        "# TYPE envoy_cluster_upstream_rq_time histogram",
    ] {
        has(&courier.times, line);
    }
    assert!(
        courier
            .text
            .iter()
            .any(|l| l.starts_with("cluster.up.upstream_rs_body_size: P0(nan,0) ")),
        "{:#?}",
        courier.text
    );
    assert!(
        courier
            .text
            .iter()
            .any(|l| l == "cluster.idle.upstream_rq_body_size: No recorded values"),
        "{:#?}",
        courier.text
    );
    // Response timing exists once a response is charged.
    assert!(
        !courier
            .times
            .iter()
            .any(|l| l.contains("rq_time") && l.contains("idle"))
    );
    assert!(
        !courier.used_only.iter().any(|l| l.contains("idle")),
        "{:#?}",
        courier.used_only
    );
    let Some(envoy_bin) = envoy_bin() else {
        eprintln!("COURIER_ENVOY not set: Envoy comparison skipped");
        return;
    };
    let envoy = run(Kind::Envoy, &envoy_bin, up);
    assert_eq!(envoy.sizes, courier.sizes, "size histograms (Prometheus)");
    assert_eq!(envoy.times, courier.times, "time histograms (Prometheus)");
    assert_eq!(envoy.text, courier.text, "size histograms (/stats)");
    assert_eq!(envoy.json, courier.json, "size histograms (JSON)");
    assert_eq!(envoy.used_only, courier.used_only, "?usedonly");
}
