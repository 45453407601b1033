//! The differential harness: courier and real Envoy started from the same
//! bootstrap, sent the same requests, their answers compared field by field.
//!
//! A [`Case`] names a listener (of one of the [`Bootstrap`]s) and a request.
//! Compared are the status, the body, every response header but `date` (so the
//! ones Envoy documents — `content-type`, `content-length`, `location`, `server`
//! — and any header a route adds) and every trailer. Where courier differs from
//! Envoy on purpose, the case says why and which value courier must give for the
//! fields that differ ([`Case::differs`]); the other fields are still compared.

use crate::client::{self, Protocol, Request, Response};
use crate::proxies::{Kind, Proxy};
use std::collections::BTreeSet;
use std::path::Path;

/// Response headers not compared: they differ between any two servers.
const IGNORED_HEADERS: &[&str] = &["date"];

/// One bootstrap: both proxies are started once from it.
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// A name for reports.
    pub id: &'static str,
    /// The YAML (admin and every listener on port 0).
    pub yaml: String,
    /// Its listeners' names (cases refer to these).
    pub listeners: Vec<&'static str>,
}

/// A part of a response that is compared.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// The status code.
    Status,
    /// The body (lossy UTF-8).
    Body,
    /// A response header (lower-case name; repeated values joined with `,`).
    Header(String),
    /// A trailer (lower-case name).
    Trailer(String),
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Field::Status => f.write_str("status"),
            Field::Body => f.write_str("body"),
            Field::Header(h) => write!(f, "header {h}"),
            Field::Trailer(t) => write!(f, "trailer {t}"),
        }
    }
}

impl Field {
    /// This field of `r` (`None`: absent).
    pub fn of(&self, r: &Response) -> Option<String> {
        match self {
            Field::Status => Some(r.status.to_string()),
            Field::Body => Some(String::from_utf8_lossy(&r.body).into_owned()),
            // A duration in ms: only its presence is comparable.
            Field::Header(h) if h == "x-envoy-upstream-service-time" => {
                r.header(h).map(|_| "<ms>".to_string())
            }
            Field::Header(h) => r.header(h),
            Field::Trailer(t) => r.trailer(t),
        }
    }
}

/// A documented, deliberate difference from Envoy.
#[derive(Debug, Clone)]
pub struct Known {
    /// Why courier differs.
    pub why: &'static str,
    /// What courier must answer for the fields that differ (`None`: absent).
    pub courier: Vec<(Field, Option<String>)>,
}

/// One request sent to both proxies.
#[derive(Debug, Clone)]
pub struct Case {
    /// Unique name, for reports.
    pub name: &'static str,
    /// The listener (in one of the bootstraps) the request goes to.
    pub listener: &'static str,
    /// HTTP/1.1 or h2c.
    pub protocol: Protocol,
    /// The request.
    pub request: Request,
    /// Set when courier differs from Envoy on purpose.
    pub known: Option<Known>,
}

impl Case {
    /// `GET path` with `host`/`:authority` `authority` over HTTP/1.1.
    pub fn get(name: &'static str, listener: &'static str, authority: &str, path: &str) -> Case {
        Case {
            name,
            listener,
            protocol: Protocol::Http1,
            request: Request {
                method: "GET".into(),
                path: path.into(),
                authority: authority.into(),
                headers: Vec::new(),
                body: Vec::new(),
            },
            known: None,
        }
    }

    /// Uses `method` instead of `GET`.
    pub fn method(mut self, method: &str) -> Case {
        self.request.method = method.into();
        self
    }

    /// Adds a request header.
    pub fn header(mut self, name: &str, value: &str) -> Case {
        self.request.headers.push((name.into(), value.into()));
        self
    }

    /// Sends `body` (with `content-length`).
    pub fn body(mut self, body: &str) -> Case {
        self.request.body = body.as_bytes().to_vec();
        self
    }

    /// Sends over h2c instead of HTTP/1.1.
    pub fn h2c(mut self) -> Case {
        self.protocol = Protocol::H2c;
        self
    }

    /// Marks a deliberate difference: courier answers `courier` for those fields.
    pub fn differs(mut self, why: &'static str, courier: &[(Field, Option<&str>)]) -> Case {
        self.known = Some(Known {
            why,
            courier: courier
                .iter()
                .map(|(f, v)| (f.clone(), v.map(str::to_string)))
                .collect(),
        });
        self
    }
}

/// Every difference in one case's answers (empty: they agree, or differ only as
/// the case documents).
pub fn compare(case: &Case, envoy: &Response, courier: &Response) -> Vec<String> {
    let mut fields: BTreeSet<Field> = [Field::Status, Field::Body].into_iter().collect();
    for r in [envoy, courier] {
        fields.extend(
            r.headers
                .iter()
                .filter(|(k, _)| !IGNORED_HEADERS.contains(&k.as_str()))
                .map(|(k, _)| Field::Header(k.clone())),
        );
        fields.extend(r.trailers.iter().map(|(k, _)| Field::Trailer(k.clone())));
    }
    if let Some(known) = &case.known {
        fields.extend(known.courier.iter().map(|(f, _)| f.clone()));
    }
    let mut diffs = Vec::new();
    for field in fields {
        let (e, c) = (field.of(envoy), field.of(courier));
        let expected = case
            .known
            .as_ref()
            .and_then(|k| k.courier.iter().find(|(f, _)| *f == field));
        match expected {
            Some((_, want)) => {
                if c != *want {
                    diffs.push(format!(
                        "{field}: courier {c:?}, but the case expects {want:?} (envoy {e:?})"
                    ));
                } else if e == *want {
                    diffs.push(format!(
                        "{field}: marked as a known difference, but Envoy agrees ({e:?})"
                    ));
                }
            }
            None if e != c => diffs.push(format!("{field}: envoy {e:?}, courier {c:?}")),
            None => {}
        }
    }
    diffs
}

/// Starts Envoy and courier for each bootstrap, runs every case on both, prints
/// one line per case, and returns every failure (all cases run even when some fail).
pub fn run(envoy: &Path, courier: &Path, bootstraps: &[Bootstrap], cases: &[Case]) -> Vec<String> {
    let mut failures = Vec::new();
    let mut names = BTreeSet::new();
    for case in cases {
        if !names.insert(case.name) {
            failures.push(format!("{}: duplicate case name", case.name));
        }
        if !bootstraps
            .iter()
            .any(|b| b.listeners.contains(&case.listener))
        {
            failures.push(format!(
                "{}: no bootstrap has listener {}",
                case.name, case.listener
            ));
        }
    }
    for b in bootstraps {
        let mine: Vec<&Case> = cases
            .iter()
            .filter(|c| b.listeners.contains(&c.listener))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let start = |kind, bin: &Path| Proxy::start(kind, bin, &b.yaml, &b.listeners);
        let (e, c) = match (start(Kind::Envoy, envoy), start(Kind::Courier, courier)) {
            (Ok(e), Ok(c)) => (e, c),
            (e, c) => {
                for err in [e.err(), c.err()].into_iter().flatten() {
                    failures.push(format!("bootstrap {}: {err}", b.id));
                }
                continue;
            }
        };
        for case in mine {
            let diffs = run_case(case, &e, &c);
            let mark = match (&case.known, diffs.is_empty()) {
                (_, false) => "DIFF ",
                (Some(_), true) => "known",
                (None, true) => "same ",
            };
            println!(
                "{mark} {} [{} {} {} {} host {}]",
                case.name,
                case.listener,
                case.protocol,
                case.request.method,
                case.request.path,
                case.request.authority
            );
            for d in &diffs {
                failures.push(format!("{}: {d}", case.name));
            }
        }
    }
    failures
}

fn run_case(case: &Case, envoy: &Proxy, courier: &Proxy) -> Vec<String> {
    let answer = |p: &Proxy| -> Result<Response, String> {
        let addr = p
            .listener(case.listener)
            .ok_or_else(|| format!("{} has no listener {}", p.kind, case.listener))?;
        client::send(addr, case.protocol, &case.request).map_err(|e| format!("{}: {e}", p.kind))
    };
    match (answer(envoy), answer(courier)) {
        (Ok(e), Ok(c)) => compare(case, &e, &c),
        (Err(e), Err(c)) => vec![format!("both failed: {e}; {c}")],
        (Err(e), Ok(_)) => vec![format!("only Envoy failed: {e}")],
        (Ok(_), Err(c)) => vec![format!("only courier failed: {c}")],
    }
}

/// Indents every line of `text` by `n` spaces.
pub fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines()
        .map(|l| {
            if l.trim().is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A bootstrap with the admin on 127.0.0.1:0 and `listeners` (YAML list items).
pub fn bootstrap(listeners: &[String]) -> String {
    format!(
        "admin:\n  address:\n    socket_address: {{ address: 127.0.0.1, port_value: 0 }}\n\
         static_resources:\n  listeners:\n{}\n",
        listeners
            .iter()
            .map(|l| indent(l, 2))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// `yaml` (a [`bootstrap`]) with `clusters` (YAML list items) as its static clusters.
pub fn with_clusters(yaml: &str, clusters: &[String]) -> String {
    format!(
        "{yaml}  clusters:\n{}\n",
        clusters
            .iter()
            .map(|c| indent(c, 2))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// A static cluster `name` of one endpoint, 127.0.0.1:`port` (`extra`: more of
/// the cluster's fields, YAML at its indentation, e.g. HTTP/2 protocol options).
pub fn loopback_cluster(name: &str, port: u16, extra: &str) -> String {
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{extra}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}"
    )
}

/// The `typed_extension_protocol_options` that make a cluster speak HTTP/2
/// (for [`loopback_cluster`]'s `extra`).
pub const HTTP2_CLUSTER: &str = "  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: { http2_protocol_options: {} }\n";

/// A listener on 127.0.0.1:0 named `name` with one HTTP connection manager (stat
/// prefix `name`, router only): `hcm_extra` is added to the manager's fields and
/// `virtual_hosts` (a YAML list) becomes its inline route configuration's hosts.
pub fn hcm_listener(name: &str, hcm_extra: &str, virtual_hosts: &str) -> String {
    hcm_listener_filters(name, hcm_extra, "", virtual_hosts)
}

/// Like [`hcm_listener`], with `http_filters` (a YAML list) before the router.
pub fn hcm_listener_filters(
    name: &str,
    hcm_extra: &str,
    http_filters: &str,
    virtual_hosts: &str,
) -> String {
    format!(
        r#"- name: {name}
  address:
    socket_address: {{ address: 127.0.0.1, port_value: 0 }}
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: {name}
{extra}
        http_filters:
{filters}        - name: envoy.filters.http.router
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
        route_config:
          name: {name}
          virtual_hosts:
{vhosts}"#,
        extra = indent(hcm_extra, 8),
        filters = if http_filters.is_empty() {
            String::new()
        } else {
            indent(http_filters, 8) + "\n"
        },
        vhosts = indent(virtual_hosts, 10),
    )
}

/// Runs `observe` (one proxy's view of a scenario, one line per observation)
/// on real Envoy and on courier, prints both side by side, and asserts they
/// agree; returns courier's lines for the test's own checks of what Envoy
/// does. `None` (the test is skipped) when there is no Envoy binary.
pub fn same_lines(observe: impl Fn(Kind, &Path) -> Vec<String>) -> Option<Vec<String>> {
    let Some(envoy) = crate::envoy_bin() else {
        eprintln!("SKIPPED: no Envoy (set COURIER_ENVOY)");
        return None;
    };
    let envoy_lines = observe(Kind::Envoy, &envoy);
    let courier_lines = observe(Kind::Courier, &crate::courier_bin());
    for (e, c) in envoy_lines.iter().zip(&courier_lines) {
        println!("envoy:   {e}\ncourier: {c}");
    }
    assert_eq!(courier_lines, envoy_lines);
    Some(courier_lines)
}
