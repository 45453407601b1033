//! RBAC evaluation per request at 10, 1 000 and 10 000 policies, through the public
//! filter API (config YAML → courier_config → courier_filters::build_chain →
//! decode_headers on a RequestState). See benches/README.md.

// A benchmark setup that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_benches::{filters_bootstrap_yaml, http_filters_from_bootstrap, poll_once};
use courier_config::filters::HttpFilterConfig;
use courier_filters::rbac::eval;
use courier_filters::{ConnFacts, FilterChain, RequestState, Verdict, build_chain};
use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;

const SIZES: [usize; 3] = [10, 1_000, 10_000];

/// An RBAC filter (ALLOW) with `n` policies `p00000…`, policy `i` allowing the principal
/// `principal(i)`.
fn rbac_yaml(n: usize, principal: impl Fn(usize) -> String) -> String {
    let mut s = String::from(
        "          - name: envoy.filters.http.rbac\n            typed_config:\n              \"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC\n              rules:\n                action: ALLOW\n                policies:\n",
    );
    for i in 0..n {
        s.push_str(&format!(
            "                  p{i:05}: {{permissions: [{{any: true}}], principals: [{}]}}\n",
            principal(i)
        ));
    }
    s
}

fn exact(i: usize) -> String {
    format!("{{header: {{name: x-user, string_match: {{exact: u{i}}}}}}}")
}

fn prefix(i: usize) -> String {
    format!("{{header: {{name: x-user, string_match: {{prefix: \"u{i}/\"}}}}}}")
}

fn conn() -> ConnFacts {
    ConnFacts {
        worker: 0,
        peer: "10.0.0.1:5000".parse().unwrap(),
        source: "10.0.0.1:5000".parse().unwrap(),
        local: "127.0.0.1:8080".parse().unwrap(),
        tls: None,
    }
}

fn request<'c>(conn: &'c ConnFacts, user: &str) -> RequestState<'c> {
    let head = http::Request::builder()
        .method("GET")
        .uri("/api/items?page=2")
        .header("host", "api.example.com")
        .header("user-agent", "bench/1.0")
        .header("accept", "*/*")
        .header("x-user", user)
        .body(())
        .unwrap()
        .into_parts()
        .0;
    RequestState::new(head, conn, conn.peer.ip(), None)
}

fn status(chain: &FilterChain, req: &mut RequestState<'_>) -> u16 {
    match poll_once(chain.decode_headers(req, |_| None)) {
        Some(Verdict::Continue) => 200,
        Some(Verdict::Respond(r)) => r.status.as_u16(),
        None => panic!("the chain suspended"),
    }
}

fn evaluate(c: &mut Criterion) {
    let mut group = c.benchmark_group("rbac/evaluate");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    group.sample_size(30);
    let conn = conn();
    for n in SIZES {
        let exact_filters =
            http_filters_from_bootstrap(&filters_bootstrap_yaml(&rbac_yaml(n, exact)));
        let prefix_filters =
            http_filters_from_bootstrap(&filters_bootstrap_yaml(&rbac_yaml(n, prefix)));
        let (exact_chain, _) = build_chain(&exact_filters, None).unwrap();
        let (prefix_chain, _) = build_chain(&prefix_filters, None).unwrap();
        let last = format!("u{}", n - 1);
        let last_prefixed = format!("u{}/x", n - 1);
        // (case, chain, x-user, expected status): the last policy in name order (the worst
        // case of a scan), a user no policy names, and prefix policies that must be scanned.
        let cases: [(&str, &FilterChain, &str, u16); 3] = [
            ("exact_last", &exact_chain, &last, 200),
            ("exact_miss", &exact_chain, "nobody", 403),
            ("prefix_last", &prefix_chain, &last_prefixed, 200),
        ];
        for (label, chain, user, want) in cases {
            assert_eq!(
                status(chain, &mut request(&conn, user)),
                want,
                "{label} at {n}"
            );
            group.bench_with_input(BenchmarkId::new(label, n), &user, |b, user| {
                b.iter_batched_ref(
                    || request(&conn, user),
                    |req| status(chain, black_box(req)),
                    BatchSize::SmallInput,
                )
            });
        }
        // The same exact-match engine without its index (the reference linear scan), to
        // show what the index saves.
        let engine = match &exact_filters[0].config {
            HttpFilterConfig::Rbac(c) => c.rules.clone().unwrap(),
            other => panic!("not rbac: {other:?}"),
        };
        let req = request(&conn, &last);
        assert_eq!(
            eval::evaluate_linear(&engine, &req)
                .matched
                .map(|p| &p.name),
            eval::evaluate(&engine, &req).matched.map(|p| &p.name)
        );
        group.bench_with_input(
            BenchmarkId::new("exact_last_linear_scan", n),
            &req,
            |b, req| b.iter(|| eval::evaluate_linear(&engine, black_box(req)).allowed),
        );
        group.bench_with_input(
            BenchmarkId::new("exact_last_engine_only", n),
            &req,
            |b, req| b.iter(|| eval::evaluate(&engine, black_box(req)).allowed),
        );
    }
    group.finish();
}

criterion_group!(benches, evaluate);
criterion_main!(benches);
