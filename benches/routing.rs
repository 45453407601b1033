//! Route selection and virtual-host selection over large route configs:
//! 10, 1 000 and 10 000 routes / domains. Target: a lookup at 10 000 within 3×
//! of the same lookup at 10 (see benches/README.md).

// A benchmark setup that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_benches::{route_table_json, route_table_request, vhost_host, vhost_table_json};
use courier_config::listener::RouteSpecifier;
use courier_config::load::Format;
use courier_config::route::{RouteConfig, RouteRequest};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::borrow::Cow;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

/// A small in-memory request: what the connection manager hands the router.
struct Req {
    path: String,
    method: &'static str,
    headers: Vec<(&'static str, String)>,
}

impl Req {
    fn new(host: &str, path: String, tenant: String) -> Self {
        Self {
            path,
            method: "GET",
            headers: vec![
                (":authority", host.to_string()),
                ("user-agent", "bench/1.0".to_string()),
                ("accept", "*/*".to_string()),
                ("x-tenant", tenant),
            ],
        }
    }
}

impl RouteRequest for Req {
    fn path(&self) -> &str {
        &self.path
    }
    fn method(&self) -> &str {
        self.method
    }
    fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| Cow::Borrowed(v.as_str()))
    }
}

/// The inline route config of the bootstrap's only listener, built from JSON text
/// through the same loader as a real config file.
fn route_config(json: serde_json::Value) -> Arc<RouteConfig> {
    let text = serde_json::to_string(&json).unwrap();
    let bootstrap = courier_config::bootstrap_from_str(&text, Format::Json)
        .unwrap_or_else(|e| panic!("bench config is invalid: {e:?}"));
    let chain = &bootstrap.listeners[0].filter_chains[0];
    match chain.hcm().map(|h| &h.route_specifier) {
        Some(RouteSpecifier::Inline(rc)) => rc.clone(),
        other => panic!("expected an inline route config, got {other:?}"),
    }
}

const SIZES: [usize; 3] = [10, 1_000, 10_000];

fn select_route(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/select_route");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for n in SIZES {
        let rc = route_config(route_table_json(n));
        // Early, middle and late hits, all on exact-path routes (index ≡ 1 mod 4)
        // so that sizes compare like with like, one late hit on a header-qualified
        // prefix route (index ≡ 3 mod 4), and a path no route matches (the regex
        // routes at the end are tried, then nothing).
        let kind = |i: usize, k: usize| i.saturating_sub(k) / 4 * 4 + k;
        let cases = [
            ("early", Some(1)),
            ("middle", Some(kind(n / 2, 1))),
            ("late", Some(kind(n - 1, 1))),
            ("late_header", Some(kind(n - 1, 3))),
            ("none", None),
        ];
        for (label, target) in cases {
            let req = match target {
                Some(i) => {
                    let (path, tenant) = route_table_request(i);
                    Req::new("api.example.com", path, tenant)
                }
                None => Req::new("api.example.com", "/nothing/here".into(), "t0".into()),
            };
            // Check the answer once, linear scan as the reference.
            let vh = rc.select_virtual_host("api.example.com").unwrap();
            let got = vh.select_route(&req).map(|r| r.name.clone());
            assert_eq!(got, target.map(|i| format!("r{i}")), "{label} at {n}");
            assert_eq!(
                vh.select_route_linear(&req).map(|r| r.name.clone()),
                got,
                "index and linear scan disagree"
            );
            group.bench_with_input(BenchmarkId::new(label, n), &req, |b, req| {
                b.iter(|| {
                    let vh = rc.select_virtual_host(black_box("api.example.com"));
                    vh.and_then(|vh| vh.select_route(black_box(req)))
                        .map(|r| r as *const _)
                })
            });
        }
    }
    group.finish();
}

fn select_virtual_host(c: &mut Criterion) {
    let mut group = c.benchmark_group("routing/select_virtual_host");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for n in SIZES {
        let rc = route_config(vhost_table_json(n));
        // The middle host of each kind (index ≡ kind mod 3), and an unknown host.
        let mid = |kind: usize| (n / 2) / 3 * 3 + kind;
        let cases = [
            ("exact", Some(mid(0))),
            ("suffix_wildcard", Some(mid(1))),
            ("prefix_wildcard", Some(mid(2))),
            ("miss", None),
        ];
        for (label, target) in cases {
            let host = target.map_or_else(|| "unknown.example.org".to_string(), vhost_host);
            let got = rc.select_virtual_host(&host).map(|v| v.name.clone());
            assert_eq!(got, target.map(|i| format!("vh{i}")), "{label} at {n}");
            group.bench_with_input(BenchmarkId::new(label, n), &host, |b, host| {
                b.iter(|| {
                    rc.select_virtual_host(black_box(host.as_str()))
                        .map(|v| v as *const _)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, select_route, select_virtual_host);
criterion_main!(benches);
