//! Control-plane corpus cases served end to end (issue 17): each case's
//! bootstrap (folder `$COURIER_CP_CORPUS`, normally
//! `../shared/control-plane-corpus`) runs in real Envoy 1.40 and in courier,
//! changed the same way for both: listeners on 127.0.0.1 port 0 and every
//! cluster endpoint on one loopback stand-in upstream (HTTP/1.1 and h2c) that
//! answers with what it received. Requests made from the case's own route
//! tables (each virtual host's first domain, each route's path or prefix) go
//! to both; the statuses, response headers and bodies (the upstream's report of
//! the request it got: method, target and every header) must be the same.
//!
//! Only what the stand-ins can serve is requested: plaintext filter chains,
//! routes to clusters without upstream TLS, matches by path alone. Values
//! that differ by nature (`date`, `x-request-id`, trace ids, service time) are
//! masked.
//!
//! ```text
//! cargo build -p courier
//! COURIER_CP_CORPUS=../shared/control-plane-corpus COURIER_ENVOY=.venv/bin/envoy \
//!   cargo test -p courier-tests --test control_plane_served -- --nocapture
//! ```
//!
//! With `COURIER_CP_SERVED_ALL=1` every case Envoy accepts and courier loads is
//! tried, and the test prints which agree (how [`CASES`] was chosen).

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::client::{self, Protocol, Request};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The cases compared: every case both proxies load whose probes the
/// stand-ins can serve and that answer deterministically, chosen with
/// `COURIER_CP_SERVED_ALL=1` (left out: cases with weighted clusters, whose
/// picks are random; OAuth2 redirects, whose state and PKCE values are;
/// `multiple-listeners-same-port-with-different-filters`, whose listeners
/// share a port in the original and are split here). Istio's and Contour's
/// bootstraps take their routes over xDS, so none of theirs has a probe.
const CASES: &[&str] = &[
    "envoy-gateway/xds-ir/accesslog",
    "envoy-gateway/xds-ir/accesslog-cel",
    "envoy-gateway/xds-ir/accesslog-endpoint-stats",
    "envoy-gateway/xds-ir/accesslog-otel-headers",
    "envoy-gateway/xds-ir/api-key-auth",
    "envoy-gateway/xds-ir/authorization-cel",
    "envoy-gateway/xds-ir/authorization-client-cidr",
    "envoy-gateway/xds-ir/authorization-http-header",
    "envoy-gateway/xds-ir/authorization-jwt-claim",
    "envoy-gateway/xds-ir/authorization-jwt-scope",
    "envoy-gateway/xds-ir/authorization-multiple-principals",
    "envoy-gateway/xds-ir/authorization-path",
    "envoy-gateway/xds-ir/backend-priority",
    "envoy-gateway/xds-ir/basic-auth",
    "envoy-gateway/xds-ir/btp-telemetry",
    "envoy-gateway/xds-ir/client-ip-detection",
    "envoy-gateway/xds-ir/compression",
    "envoy-gateway/xds-ir/csrf",
    "envoy-gateway/xds-ir/custom-response-source",
    "envoy-gateway/xds-ir/dns-lookup-family",
    "envoy-gateway/xds-ir/ext-auth",
    "envoy-gateway/xds-ir/ext-auth-backend",
    "envoy-gateway/xds-ir/ext-auth-body",
    "envoy-gateway/xds-ir/ext-auth-recomputation",
    "envoy-gateway/xds-ir/ext-auth-retry",
    "envoy-gateway/xds-ir/ext-auth-with-weighted-backend-ref",
    "envoy-gateway/xds-ir/ext-proc-with-retries",
    "envoy-gateway/xds-ir/ext-proc-with-traffic-settings",
    "envoy-gateway/xds-ir/fault-injection",
    "envoy-gateway/xds-ir/headers-with-disable-request-id",
    "envoy-gateway/xds-ir/headers-with-generate-request-id",
    "envoy-gateway/xds-ir/headers-with-preserve-or-generate-request-id",
    "envoy-gateway/xds-ir/headers-with-preserve-request-id",
    "envoy-gateway/xds-ir/health-check",
    "envoy-gateway/xds-ir/health-check-backend-log-variants",
    "envoy-gateway/xds-ir/health-check-host-hierarchy",
    "envoy-gateway/xds-ir/health-check-log-precedence",
    "envoy-gateway/xds-ir/health-check-with-overrides",
    "envoy-gateway/xds-ir/host-normalization",
    "envoy-gateway/xds-ir/http-early-header-mutation",
    "envoy-gateway/xds-ir/http-endpoint-stats",
    "envoy-gateway/xds-ir/http-late-header-mutation",
    "envoy-gateway/xds-ir/http-preserve-client-protocol",
    "envoy-gateway/xds-ir/http-route-direct-response",
    "envoy-gateway/xds-ir/http-route-dynamic-resolver",
    "envoy-gateway/xds-ir/http-route-https-mtls-accept-untrusted",
    "envoy-gateway/xds-ir/http-route-metrics-stat",
    "envoy-gateway/xds-ir/http-route-mirror",
    "envoy-gateway/xds-ir/http-route-multiple-mirrors",
    "envoy-gateway/xds-ir/http-route-multiple-mirrors-percentage",
    "envoy-gateway/xds-ir/http-route-response-add-remove-headers",
    "envoy-gateway/xds-ir/http-route-response-remove-headers",
    "envoy-gateway/xds-ir/http-route-rewrite-url-fullpath",
    "envoy-gateway/xds-ir/http-route-rewrite-url-regex",
    "envoy-gateway/xds-ir/http-route-timeout",
    "envoy-gateway/xds-ir/http-route-weighted-backend",
    "envoy-gateway/xds-ir/http-route-with-metadata",
    "envoy-gateway/xds-ir/http-route-with-trafficpolicy-metadta",
    "envoy-gateway/xds-ir/http-route-zonal-lb-routing",
    "envoy-gateway/xds-ir/http-route-zonal-routing",
    "envoy-gateway/xds-ir/http-upgrade-spdy",
    "envoy-gateway/xds-ir/http1-preserve-case",
    "envoy-gateway/xds-ir/http1-trailers",
    "envoy-gateway/xds-ir/httproute-redirect",
    "envoy-gateway/xds-ir/jwt-custom-extractor",
    "envoy-gateway/xds-ir/jwt-multi-route-multi-provider",
    "envoy-gateway/xds-ir/jwt-multi-route-single-provider",
    "envoy-gateway/xds-ir/jwt-optional",
    "envoy-gateway/xds-ir/jwt-single-route-single-match",
    "envoy-gateway/xds-ir/listener-connection-limit",
    "envoy-gateway/xds-ir/listener-tcp-keepalive",
    "envoy-gateway/xds-ir/local-ratelimit",
    "envoy-gateway/xds-ir/local-ratelimit-duplicate-cidr",
    "envoy-gateway/xds-ir/local-ratelimit-path-match",
    "envoy-gateway/xds-ir/local-ratelimit-query-parameters",
    "envoy-gateway/xds-ir/local-ratelimit-shadow-mode",
    "envoy-gateway/xds-ir/max-conn-per-socket-event",
    "envoy-gateway/xds-ir/max-request-headers-kb",
    "envoy-gateway/xds-ir/merge-backends-gateway-traffic",
    "envoy-gateway/xds-ir/merge-backends-healthcheck-hostname",
    "envoy-gateway/xds-ir/merge-backends-statname",
    "envoy-gateway/xds-ir/metrics-virtual-host",
    "envoy-gateway/xds-ir/oidc",
    "envoy-gateway/xds-ir/oidc-backend-cluster-provider",
    "envoy-gateway/xds-ir/ratelimit-merge-hostnames",
    "envoy-gateway/xds-ir/ready",
    "envoy-gateway/xds-ir/request-buffer",
    "envoy-gateway/xds-ir/retry",
    "envoy-gateway/xds-ir/tracing",
    "envoy-gateway/xds-ir/tracing-datadog",
    "envoy-gateway/xds-ir/tracing-otel-headers",
    "envoy-gateway/xds-ir/tracing-otel-sampler",
    "envoy-gateway/xds-ir/tracing-zipkin",
    "envoy-gateway/config-dump/internal~cmd~egctl~testdata~translate~out~no-service-cluster-ip.all.yaml@xds.envoy-gateway-system~eg",
];

/// Requests per case at most (bounded, so a large case stays quick).
const MAX_REQUESTS: usize = 16;

/// `key` of `v` in either spelling the corpus uses (`socket_address` or
/// `socketAddress`).
fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).or_else(|| v.get(camel(key)))
}

fn field_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    if v.get(key).is_some() {
        v.get_mut(key)
    } else {
        v.get_mut(camel(key))
    }
}

fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn list<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    field(v, key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    field(v, key).and_then(Value::as_str)
}

/// One request: the listener, protocol, authority and path.
#[derive(Debug, Clone)]
struct Probe {
    listener: String,
    protocol: Protocol,
    authority: String,
    path: String,
}

/// A case made servable on loopback, and what to ask it.
struct Plan {
    json: String,
    listeners: Vec<String>,
    probes: Vec<Probe>,
}

/// Points every endpoint of `cluster` at `upstream`; whether the cluster can
/// be reached in plaintext (no upstream TLS).
fn redirect_cluster(cluster: &mut Value, upstream: SocketAddr) -> bool {
    let plain = field(cluster, "transport_socket").is_none()
        && field(cluster, "transport_socket_matches").is_none();
    let Some(la) = field_mut(cluster, "load_assignment") else {
        return false;
    };
    let mut any = false;
    let Some(eps) = field_mut(la, "endpoints").and_then(Value::as_array_mut) else {
        return false;
    };
    for locality in eps {
        let Some(lbs) = field_mut(locality, "lb_endpoints").and_then(Value::as_array_mut) else {
            continue;
        };
        for lb in lbs {
            let Some(ep) = field_mut(lb, "endpoint") else {
                continue;
            };
            if let Some(addr) = field_mut(ep, "address") {
                *addr = json!({"socket_address": {"address": "127.0.0.1", "port_value": upstream.port()}});
                any = true;
            }
            // A health check address of its own goes to the stand-in too.
            if let Some(hc) = field_mut(ep, "health_check_config")
                && let Some(m) = hc.as_object_mut()
            {
                m.remove("port_value");
                m.remove("portValue");
                m.remove("address");
            }
        }
    }
    plain && any
}

/// The authority a virtual host's first domain stands for.
fn authority(domain: &str) -> String {
    match domain {
        "*" => "example.com".into(),
        d if d.starts_with("*.") => format!("a{}", &d[1..]),
        d if d.ends_with('*') => format!("{}a", d.trim_end_matches('*')),
        d => d.into(),
    }
}

/// The path a route's match stands for, when it matches by path alone.
fn path_of(route: &Value) -> Option<String> {
    let m = field(route, "match")?;
    for extra in [
        "headers",
        "query_parameters",
        "grpc",
        "runtime_fraction",
        "tls_context",
        "dynamic_metadata",
        "filter_state",
        "cel_matcher",
    ] {
        if field(m, extra).is_some() {
            return None;
        }
    }
    if let Some(p) = text(m, "prefix") {
        return Some(if p.is_empty() { "/".into() } else { p.into() });
    }
    text(m, "path")
        .or_else(|| text(m, "path_separated_prefix"))
        .map(str::to_string)
}

/// Whether a route's action sends only to `plain` clusters (or answers itself).
fn servable(route: &Value, plain: &std::collections::HashSet<String>) -> bool {
    if field(route, "redirect").is_some() || field(route, "direct_response").is_some() {
        return true;
    }
    let Some(action) = field(route, "route") else {
        return false;
    };
    if let Some(c) = text(action, "cluster") {
        return plain.contains(c);
    }
    if let Some(w) = field(action, "weighted_clusters") {
        let mut names = list(w, "clusters")
            .filter_map(|c| text(c, "name"))
            .peekable();
        return names.peek().is_some() && names.all(|n| plain.contains(n));
    }
    false
}

fn plan(case: &Value, upstream: SocketAddr) -> Option<Plan> {
    let mut case = case.clone();
    let text_of_case = case.to_string();
    // Files relative to the working directory the proxies do not have.
    if text_of_case.contains("standin-files") || text_of_case.contains("\"pipe\"") {
        return None;
    }
    let statics = field_mut(&mut case, "static_resources")?;
    let mut plain = std::collections::HashSet::new();
    if let Some(clusters) = field_mut(statics, "clusters").and_then(Value::as_array_mut) {
        for c in clusters {
            let name = text(c, "name").unwrap_or("").to_string();
            if redirect_cluster(c, upstream) {
                plain.insert(name);
            }
        }
    }
    let mut names = Vec::new();
    let mut probes = Vec::new();
    let listeners = field_mut(statics, "listeners").and_then(Value::as_array_mut)?;
    for (i, l) in listeners.iter_mut().enumerate() {
        let obj = l.as_object_mut()?;
        if obj.contains_key("internal_listener") || obj.contains_key("internalListener") {
            return None;
        }
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("listener{i}"), str::to_string);
        obj.insert("name".into(), Value::String(name.clone()));
        let address = obj
            .get("address")
            .and_then(|a| field(a, "socket_address"))?;
        // UDP (QUIC) listeners are not served here.
        if text(address, "protocol") == Some("UDP") {
            return None;
        }
        obj.insert(
            "address".into(),
            json!({"socket_address": {"address": "127.0.0.1", "port_value": 0}}),
        );
        obj.remove("additional_addresses");
        obj.remove("additionalAddresses");
        names.push(name.clone());
        let chains = list(l, "filter_chains").chain(field(l, "default_filter_chain"));
        for chain in chains {
            if field(chain, "transport_socket").is_some() {
                continue;
            }
            if let Some(m) = field(chain, "filter_chain_match")
                && m.as_object().is_some_and(|m| !m.is_empty())
            {
                continue;
            }
            for f in list(chain, "filters") {
                let Some(hcm) = field(f, "typed_config") else {
                    continue;
                };
                if !text(hcm, "@type").is_some_and(|t| t.ends_with("HttpConnectionManager")) {
                    continue;
                }
                let protocol = if text(hcm, "codec_type") == Some("HTTP2") {
                    Protocol::H2c
                } else {
                    Protocol::Http1
                };
                let Some(rc) = field(hcm, "route_config") else {
                    continue;
                };
                for vh in list(rc, "virtual_hosts") {
                    let Some(domain) = list(vh, "domains").next().and_then(Value::as_str) else {
                        continue;
                    };
                    for route in list(vh, "routes") {
                        if probes.len() >= MAX_REQUESTS {
                            break;
                        }
                        if let Some(path) = path_of(route)
                            && servable(route, &plain)
                        {
                            probes.push(Probe {
                                listener: name.clone(),
                                protocol,
                                authority: authority(domain),
                                path,
                            });
                        }
                    }
                }
            }
        }
    }
    if probes.is_empty() {
        return None;
    }
    Some(Plan {
        json: case.to_string(),
        listeners: names,
        probes,
    })
}

/// Request headers whose values differ from run to run.
const VOLATILE: &[&str] = &[
    "x-request-id",
    "traceparent",
    "tracestate",
    "x-b3-traceid",
    "x-b3-spanid",
    "x-b3-parentspanid",
    "x-b3-sampled",
    "x-datadog-trace-id",
    "x-datadog-parent-id",
    // The trace id's time and the sampler's random decision.
    "x-datadog-tags",
    "x-datadog-sampling-priority",
];

/// The stand-in upstream: HTTP/1.1 and h2c on one port, answering 200 with the
/// request's method, target and headers (sorted; volatile values masked).
fn upstream() -> SocketAddr {
    courier_tests::hyper_upstream::start(report)
}

fn report(req: &http::request::Parts) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    let mut lines: Vec<String> = req
        .headers
        .iter()
        .map(|(k, v)| {
            let v = if VOLATILE.contains(&k.as_str()) {
                "<volatile>".into()
            } else {
                String::from_utf8_lossy(v.as_bytes()).into_owned()
            };
            format!("{k}: {v}")
        })
        .collect();
    lines.sort();
    let body = format!(
        "{} {} {:?}\n{}\n",
        req.method,
        req.uri,
        req.version,
        lines.join("\n")
    );
    http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)))
}

/// Response headers whose values differ from run to run.
const VOLATILE_RESPONSE: &[&str] = &["date", "x-envoy-upstream-service-time", "x-request-id"];

/// What one proxy answered to each probe, one line per probe.
fn observe(kind: Kind, bin: &Path, plan: &Plan) -> Result<Vec<String>, String> {
    let names: Vec<&str> = plan.listeners.iter().map(String::as_str).collect();
    let p = Proxy::start(kind, bin, &plan.json, &names)?;
    let mut out = Vec::new();
    for probe in &plan.probes {
        let addr = p
            .listener(&probe.listener)
            .ok_or_else(|| format!("no listener {}", probe.listener))?;
        let r = client::send(
            addr,
            probe.protocol,
            &Request {
                method: "GET".into(),
                path: probe.path.clone(),
                authority: probe.authority.clone(),
                headers: Vec::new(),
                body: Vec::new(),
            },
        );
        let line = match r {
            Ok(r) => {
                let mut headers: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| {
                        if VOLATILE_RESPONSE.contains(&k.as_str()) {
                            format!("{k}: <volatile>")
                        } else {
                            format!("{k}: {v}")
                        }
                    })
                    .collect();
                headers.sort();
                format!(
                    "{} {} {} -> {}\n  {}\n  {}",
                    probe.listener,
                    probe.authority,
                    probe.path,
                    r.status,
                    headers.join("\n  "),
                    String::from_utf8_lossy(&r.body).replace('\n', "\n  ")
                )
            }
            Err(e) => format!(
                "{} {} {} -> error {e}",
                probe.listener, probe.authority, probe.path
            ),
        };
        out.push(line);
    }
    Ok(out)
}

/// The corpus folder, or `None` (the test is skipped) without one.
fn corpus() -> Option<PathBuf> {
    std::env::var_os("COURIER_CP_CORPUS").map(PathBuf::from)
}

/// Compares one case; `Err` says how the proxies differ (or why it could not run).
fn compare(dir: &Path, name: &str, envoy: &Path, upstream: SocketAddr) -> Result<usize, String> {
    let file = dir.join(format!("{name}.json"));
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let case: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let plan = plan(&case, upstream).ok_or("nothing the stand-ins can serve")?;
    let e = observe(Kind::Envoy, envoy, &plan)?;
    let c = observe(Kind::Courier, &courier_bin(), &plan)?;
    let diffs: Vec<String> = e
        .iter()
        .zip(&c)
        .filter(|(e, c)| e != c)
        .map(|(e, c)| format!("envoy:   {e}\ncourier: {c}"))
        .collect();
    if diffs.is_empty() {
        Ok(plan.probes.len())
    } else {
        Err(diffs.join("\n"))
    }
}

/// The cases Envoy accepts, from the manifest.
fn accepted(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("MANIFEST.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && l.ends_with("\taccept"))
        .filter_map(|l| l.split('\t').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn control_plane_cases_are_served_as_envoy_serves_them() {
    let Some(dir) = corpus() else {
        eprintln!("SKIPPED: COURIER_CP_CORPUS is not set");
        return;
    };
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let up = upstream();
    if std::env::var_os("COURIER_CP_SERVED_ALL").is_some() {
        let mut agree = Vec::new();
        for name in accepted(&dir) {
            match compare(&dir, &name, &envoy, up) {
                Ok(n) => {
                    println!("AGREE {name} ({n} requests)");
                    agree.push(name);
                }
                Err(why) => println!("DIFFER {name}\n{why}"),
            }
        }
        println!("{} cases agree:\n{agree:#?}", agree.len());
        return;
    }
    let mut failures = Vec::new();
    let mut requests = 0;
    for name in CASES {
        match compare(&dir, name, &envoy, up) {
            Ok(n) => requests += n,
            Err(why) => failures.push(format!("{name}:\n{why}")),
        }
    }
    println!(
        "{} cases, {requests} requests served alike",
        CASES.len() - failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(CASES.len() >= 30, "only {} cases compared", CASES.len());
}

#[test]
fn authorities_stand_for_their_domains() {
    assert_eq!(authority("*"), "example.com");
    assert_eq!(authority("*.example.com"), "a.example.com");
    assert_eq!(authority("www.example.*"), "www.example.a");
    assert_eq!(authority("foo.com:8080"), "foo.com:8080");
    let route = json!({"match": {"prefix": ""}, "route": {"cluster": "c"}});
    assert_eq!(path_of(&route).as_deref(), Some("/"));
    let header = json!({"match": {"prefix": "/", "headers": [{"name": "x"}]}});
    assert_eq!(path_of(&header), None);
}
