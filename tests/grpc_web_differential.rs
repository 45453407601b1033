//! The gRPC-Web and gRPC statistics filters (`envoy.filters.http.grpc_web` then
//! `envoy.filters.http.grpc_stats` with `emit_filter_state` and `stats_for_all_methods`,
//! as Envoy Gateway puts them on every GRPCRoute listener) beside real Envoy: gRPC-Web
//! requests (binary and text, HTTP/1.1 and h2c) and plain gRPC ones through both proxies
//! to one h2c gRPC upstream, comparing the status, the response headers, the body (the
//! messages and the `0x80` trailers frame, base64 for text), the trailers, what the
//! upstream received, and the `cluster.<c>.grpc.*` / `cluster.<c>.grpc-web.*` counters.
//! Without Envoy (`COURIER_ENVOY`) only courier is checked.
//!
//! Where courier differs on purpose, the case says why (`DIFFERS`).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test grpc_web_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use courier_tests::client::{self, Protocol, Request};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, envoy_bin};
use http_body_util::BodyExt as _;
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;

const FILTERS: &str = r#"- name: envoy.filters.http.grpc_web
  typedConfig: {"@type": type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb}
- name: envoy.filters.http.grpc_stats
  typedConfig: {"@type": type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig, emitFilterState: true, statsForAllMethods: true}
"#;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/down." }
    route: { cluster: down }
  - match: { prefix: "/retry." }
    route: { cluster: up, retry_policy: { retry_on: 5xx, num_retries: 2 } }
  - match: { prefix: "/hedge." }
    route:
      cluster: up
      retry_policy: { retry_on: 5xx, num_retries: 1, per_try_timeout: 5s }
      hedge_policy: { hedge_on_per_try_timeout: true }
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn cluster(name: &str, port: u16) -> String {
    format!(
        "- name: {name}\n  connect_timeout: 1s\n  typed_extension_protocol_options:\n    envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n      \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n      explicit_http_config: {{ http2_protocol_options: {{}} }}\n  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n"
    )
}

/// The other grpc_stats configs, each on a listener of its own routing to a cluster of
/// the listener's name (the same upstream): an allowlist naming one method, dots
/// replaced in service names, and no setting (Envoy 1.40 then names no method).
const STATS_LISTENERS: &[(&str, &str)] = &[
    (
        "allow",
        "individual_method_stats_allowlist: {services: [{name: pkg.Echo, method_names: [Fail]}]}",
    ),
    (
        "dots",
        "stats_for_all_methods: true, replace_dots_in_grpc_service_name: true",
    ),
    ("plain", ""),
];

fn yaml(up: SocketAddr, down: u16) -> String {
    let mut listeners = vec![hcm_listener_filters("grpc", "", FILTERS, VHOSTS)];
    let mut clusters = vec![cluster("up", up.port()), cluster("down", down)];
    for (name, config) in STATS_LISTENERS {
        let filters = format!(
            "- name: envoy.filters.http.grpc_stats\n  typed_config: {{\"@type\": type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig, {config}}}\n"
        );
        let vhosts = format!(
            "- name: all\n  domains: [\"*\"]\n  routes:\n  - match: {{ prefix: \"/\" }}\n    route: {{ cluster: {name} }}\n"
        );
        listeners.push(hcm_listener_filters(name, "", &filters, &vhosts));
        clusters.push(cluster(name, up.port()));
    }
    format!(
        "{}  clusters:\n{}\n",
        bootstrap(&listeners),
        clusters
            .iter()
            .map(|c| indent(c, 2))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// A gRPC message frame.
fn frame(flag: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![flag];
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A response body: data frames then trailers.
struct Frames(VecDeque<hyper::body::Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the upstream saw of one request: its path, the headers gRPC-Web changes, its body.
type Seen = String;

const SEEN_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "te",
    "grpc-accept-encoding",
    "accept",
    "x-grpc-web",
    "x-user-agent",
];

/// The gRPC upstream (h2c): `/pkg.Echo/Unary` echoes each message back then
/// `grpc-status: 0`; `/pkg.Echo/Fail` answers one message then `grpc-status: 5`;
/// `/pkg.Echo/TrailersOnly` a trailers-only `grpc-status: 7`; `/pkg.Echo/NotGrpc` a 503
/// with a text body; `/pkg.Echo/NotGrpcBig` a 502 with 21 000 bytes of HTML.
fn upstream() -> (SocketAddr, mpsc::Receiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let tx = tx.clone();
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let (head, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let headers: Vec<String> = SEEN_HEADERS
                                .iter()
                                .filter_map(|h| {
                                    head.headers
                                        .get(*h)
                                        .map(|v| format!("{h}={}", v.to_str().unwrap_or("?")))
                                })
                                .collect();
                            tx.send(format!(
                                "{} {} {headers:?} body={:?}",
                                head.method,
                                head.uri.path(),
                                hex(&body)
                            ))
                            .ok();
                            let path = head.uri.path().to_string();
                            let mut frames = VecDeque::new();
                            let mut trailers = http::HeaderMap::new();
                            let mut resp = http::Response::builder()
                                .header("content-type", "application/grpc")
                                .header("x-upstream", "yes");
                            match path.as_str() {
                                "/pkg.Echo/Unary" | "/x" => {
                                    // Echo the request's bytes (its messages) in two DATA frames.
                                    let (a, b) = body.split_at(body.len() / 2);
                                    frames.push_back(hyper::body::Frame::data(
                                        Bytes::copy_from_slice(a),
                                    ));
                                    frames.push_back(hyper::body::Frame::data(
                                        Bytes::copy_from_slice(b),
                                    ));
                                    trailers
                                        .insert("grpc-status", http::HeaderValue::from_static("0"));
                                }
                                "/pkg.Echo/Fail" => {
                                    frames.push_back(hyper::body::Frame::data(Bytes::from(frame(
                                        0, b"partial",
                                    ))));
                                    trailers
                                        .insert("grpc-status", http::HeaderValue::from_static("5"));
                                    trailers.insert(
                                        "grpc-message",
                                        http::HeaderValue::from_static("not%20found"),
                                    );
                                }
                                "/pkg.Echo/TrailersOnly" => {
                                    resp = resp
                                        .header("grpc-status", "7")
                                        .header("grpc-message", "denied");
                                }
                                // Connect: a unary answer, and streams ending with their
                                // end-of-stream frame (flag 2), one naming an error.
                                "/pkg.Connect/Unary" => {
                                    resp = http::Response::builder()
                                        .header("content-type", "application/proto");
                                    frames.push_back(hyper::body::Frame::data(Bytes::from_static(
                                        b"\x0a\x02hi",
                                    )));
                                }
                                "/pkg.Connect/Stream" | "/pkg.Connect/StreamFail" => {
                                    resp = http::Response::builder()
                                        .header("content-type", "application/connect+proto");
                                    let end: &[u8] = if path.ends_with("Fail") {
                                        br#"{"error":{"code":"internal","message":"no"}}"#
                                    } else {
                                        b"{}"
                                    };
                                    let mut all = [frame(0, b"a"), frame(0, b"bc")].concat();
                                    all.extend(frame(2, end));
                                    frames.push_back(hyper::body::Frame::data(Bytes::from(all)));
                                }
                                "/pkg.Echo/NotGrpcBig" => {
                                    resp = http::Response::builder()
                                        .status(502)
                                        .header("content-type", "text/html");
                                    for c in [b'a', b'b', b'c'] {
                                        frames.push_back(hyper::body::Frame::data(Bytes::from(
                                            vec![c; 7000],
                                        )));
                                    }
                                }
                                _ => {
                                    resp = http::Response::builder()
                                        .status(503)
                                        .header("content-type", "text/plain")
                                        .header("content-length", "16");
                                    frames.push_back(hyper::body::Frame::data(Bytes::from_static(
                                        b"upstream says no",
                                    )));
                                }
                            }
                            if !trailers.is_empty() {
                                frames.push_back(hyper::body::Frame::trailers(trailers));
                            }
                            Ok::<_, std::convert::Infallible>(resp.body(Frames(frames)).unwrap())
                        }
                    });
                tokio::spawn(
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(s), service),
                );
            }
        });
    });
    (addr, rx)
}

/// A text body: base64 pieces, each padded on its own (a frame each), decoded in turn.
fn decode_text(body: &[u8]) -> String {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, group) in body.chunks(4).enumerate() {
        if group.ends_with(b"=") || (i + 1) * 4 >= body.len() {
            match STANDARD.decode(&body[start..((i + 1) * 4).min(body.len())]) {
                Ok(d) => out.extend(d),
                Err(_) => return "not base64".into(),
            }
            start = (i + 1) * 4;
        }
    }
    hex(&out)
}

/// `s` without its `content-length=N` entry.
fn without_length(s: &str) -> String {
    let Some(at) = s.find("\"content-length=") else {
        return s.to_string();
    };
    let end = s[at + 1..].find('"').map_or(s.len(), |e| at + 1 + e + 1);
    let end = if s[end..].starts_with(", ") {
        end + 2
    } else {
        end
    };
    format!("{}{}", &s[..at], &s[end..])
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// A case: protocol, path, content type (none: not sent), `accept`, body, and why
/// courier differs from Envoy there (checked for courier alone), if it does.
struct Case {
    listener: &'static str,
    protocol: Protocol,
    path: &'static str,
    content_type: Option<&'static str>,
    accept: Option<&'static str>,
    body: Vec<u8>,
    /// More request headers.
    extra: &'static [(&'static str, &'static str)],
    differs: Option<&'static str>,
}

fn case(protocol: Protocol, path: &'static str, content_type: &'static str, body: Vec<u8>) -> Case {
    Case {
        listener: "grpc",
        protocol,
        path,
        content_type: Some(content_type),
        accept: None,
        body,
        extra: &[],
        differs: None,
    }
}

fn cases() -> Vec<Case> {
    let two = [frame(0, b"hello"), frame(0, b"world!")].concat();
    let text = |b: &[u8]| STANDARD.encode(b).into_bytes();
    let mut out = Vec::new();
    for protocol in [Protocol::Http1, Protocol::H2c] {
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/grpc-web+proto",
            two.clone(),
        ));
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/grpc-web",
            frame(0, b"a"),
        ));
        out.push(Case {
            accept: Some("application/grpc-web-text"),
            ..case(
                protocol,
                "/pkg.Echo/Unary",
                "application/grpc-web-text",
                text(&two),
            )
        });
        // A text request, a binary answer (no `accept`).
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/grpc-web-text+proto",
            text(&frame(0, b"t")),
        ));
        // Each message base64-encoded apart, as a client streaming them would.
        out.push(Case {
            accept: Some("application/grpc-web-text+proto"),
            ..case(
                protocol,
                "/pkg.Echo/Unary",
                "application/grpc-web-text",
                [text(&frame(0, b"one")), text(&frame(0, b"xy"))].concat(),
            )
        });
        out.push(case(
            protocol,
            "/pkg.Echo/Fail",
            "application/grpc-web+proto",
            frame(0, b"q"),
        ));
        out.push(Case {
            accept: Some("application/grpc-web-text"),
            ..case(
                protocol,
                "/pkg.Echo/Fail",
                "application/grpc-web-text",
                text(&frame(0, b"q")),
            )
        });
        out.push(case(
            protocol,
            "/pkg.Echo/TrailersOnly",
            "application/grpc-web+proto",
            frame(0, b"q"),
        ));
        out.push(case(
            protocol,
            "/pkg.Echo/NotGrpc",
            "application/grpc-web+proto",
            frame(0, b"q"),
        ));
        // A longer one: its first 16 KiB become the message (over h2c, a header list
        // larger than hyper's client takes: both proxies' answers are refused alike).
        out.push(case(
            protocol,
            "/pkg.Echo/NotGrpcBig",
            "application/grpc-web+proto",
            frame(0, b"q"),
        ));
        // A cluster nobody listens on: the router's local reply.
        out.push(case(
            protocol,
            "/down.Svc/M",
            "application/grpc-web+proto",
            frame(0, b"q"),
        ));
        // Not gRPC-Web: untouched; a path that names no method: not counted.
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/json",
            b"{}".to_vec(),
        ));
        out.push(case(protocol, "/x", "application/grpc-web", frame(0, b"x")));
        // A route that retries (the request body is kept for replay): the upstream's
        // 503 is retried twice; a text body that is not base64 is answered at once.
        out.push(case(
            protocol,
            "/retry.Svc/M",
            "application/grpc-web-text",
            text(&frame(0, b"r")),
        ));
        out.push(case(
            protocol,
            "/retry.Svc/M",
            "application/grpc-web-text",
            b"AA*A".to_vec(),
        ));
        // The same under hedging (its attempts are awaited apart).
        out.push(case(
            protocol,
            "/hedge.Svc/M",
            "application/grpc-web-text",
            b"AA*A".to_vec(),
        ));
        // Plain gRPC: grpc_web leaves it, grpc_stats counts it.
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/grpc",
            two.clone(),
        ));
        // Not base64 (a length that is no multiple of four — shorter than one block, so neither proxy passes any of it on, whatever the framing; a bad character): Envoy's
        // 400, made a gRPC-Web answer.
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/grpc-web-text",
            b"AAF".to_vec(),
        ));
        out.push(case(
            protocol,
            "/pkg.Echo/Unary",
            "application/grpc-web-text",
            b"AAAA*AAA".to_vec(),
        ));
    }
    // Connect requests (grpc_stats counts them; grpc_web leaves them).
    for listener in ["grpc", "plain"] {
        out.push(Case {
            listener,
            extra: &[("connect-protocol-version", "1")],
            ..case(
                Protocol::H2c,
                "/pkg.Connect/Unary",
                "application/proto",
                b"\x0a\x01x".to_vec(),
            )
        });
        for path in ["/pkg.Connect/Stream", "/pkg.Connect/StreamFail"] {
            out.push(Case {
                listener,
                ..case(
                    Protocol::H2c,
                    path,
                    "application/connect+proto",
                    frame(0, b"q"),
                )
            });
        }
    }
    let two = [frame(0, b"hello"), frame(0, b"world!")].concat();
    for (listener, _) in STATS_LISTENERS {
        for path in [
            "/pkg.Echo/Unary",
            "/pkg.Echo/Fail",
            "/pkg.Echo/TrailersOnly",
            "/x",
        ] {
            out.push(Case {
                listener,
                ..case(Protocol::H2c, path, "application/grpc", two.clone())
            });
        }
    }
    out
}

/// What one proxy showed: each case's outcome (with why courier differs there, if it
/// does), what the upstream received, and the gRPC counters.
type Outcome = (
    Vec<(String, Option<&'static str>)>,
    Vec<String>,
    Vec<String>,
);

fn run(kind: Kind, bin: &std::path::Path) -> Outcome {
    let (up, seen) = upstream();
    let down = TcpListener::bind("127.0.0.1:0").unwrap();
    let down_port = down.local_addr().unwrap().port();
    drop(down);
    let names: Vec<&str> = std::iter::once("grpc")
        .chain(STATS_LISTENERS.iter().map(|(n, _)| *n))
        .collect();
    let p = Proxy::start(kind, bin, &yaml(up, down_port), &names).unwrap();
    let mut out = Vec::new();
    let mut upstream_saw = Vec::new();
    for c in cases() {
        let mut headers = vec![
            ("x-grpc-web".to_string(), "1".to_string()),
            (
                "x-user-agent".to_string(),
                "grpc-web-javascript/0.1".to_string(),
            ),
        ];
        if let Some(ct) = c.content_type {
            headers.push(("content-type".into(), ct.into()));
        }
        headers.extend(c.extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        if let Some(a) = c.accept {
            headers.push(("accept".into(), a.into()));
        }
        let r = client::send(
            p.listener(c.listener).unwrap(),
            c.protocol,
            &Request {
                method: "POST".into(),
                path: c.path.into(),
                authority: "example.com".into(),
                headers,
                body: c.body.clone(),
            },
        );
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                out.push((
                    format!(
                        "{} {} {:?} -> client error {}",
                        c.protocol,
                        c.path,
                        c.content_type,
                        // Without the proxy's address.
                        e.rsplit(": ").next().unwrap_or("")
                    ),
                    c.differs,
                ));
                upstream_saw.extend(seen.try_iter());
                continue;
            }
        };
        let shown: Vec<String> = [
            "content-type",
            "content-length",
            "grpc-status",
            "grpc-message",
            "x-upstream",
            "transfer-encoding",
        ]
        .iter()
        .filter_map(|h| {
            r.header(h).map(|v| match v.len() {
                // A long message: its length and ends.
                n if n > 64 => format!("{h}=<{n} bytes {}..{}>", &v[..8], &v[n - 8..]),
                _ => format!("{h}={v}"),
            })
        })
        .collect();
        let body = if r.header("content-type").is_some_and(|t| t.contains("text")) {
            format!(
                "text {:?} = {}",
                String::from_utf8_lossy(&r.body),
                decode_text(&r.body)
            )
        } else {
            hex(&r.body)
        };
        out.push((
            format!(
                "{} {} {} {:?} accept={:?} -> {} {shown:?} body={body} trailers={:?}",
                c.listener, c.protocol, c.path, c.content_type, c.accept, r.status, r.trailers
            ),
            c.differs,
        ));
        upstream_saw.extend(seen.try_iter());
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let mut stats: Vec<String> = String::from_utf8_lossy(&stats.body)
        .lines()
        // `cluster.down.grpc.*.request_message_count` is left out: whether a message is
        // counted before the connection to `down` fails is a race in either proxy.
        .filter(|l| {
            ["up", "allow", "dots", "plain"]
                .iter()
                .any(|c| l.starts_with(&format!("cluster.{c}.grpc")))
        })
        .map(str::to_string)
        .collect();
    stats.sort();
    // The same counters as Prometheus has them: Envoy's default tag extractors take the
    // gRPC service and method out of `cluster.<c>.grpc.<service>.<method>.*`.
    let prom = client::get(&p.admin, "/stats/prometheus").unwrap();
    let mut prom: Vec<String> = String::from_utf8_lossy(&prom.body)
        .lines()
        .filter(|l| {
            l.starts_with("envoy_cluster_grpc") && !l.contains("envoy_cluster_name=\"down\"")
        })
        .map(str::to_string)
        .collect();
    prom.sort();
    stats.extend(prom);
    upstream_saw.extend(seen.try_iter());
    (out, upstream_saw, stats)
}

#[test]
fn grpc_web_and_grpc_stats_as_envoy() {
    let (c, c_seen, c_stats) = run(Kind::Courier, &courier_bin());
    println!("courier:");
    for (l, _) in &c {
        println!("{l}");
    }
    println!("{c_seen:#?}\n{c_stats:#?}");
    assert!(c[0].0.contains("-> 200"), "{}", c[0].0);
    let Some(envoy) = envoy_bin() else {
        eprintln!("SKIPPED the Envoy comparison: no Envoy (set COURIER_ENVOY)");
        return;
    };
    let (e, e_seen, e_stats) = run(Kind::Envoy, &envoy);
    println!("envoy:");
    for (l, _) in &e {
        println!("{l}");
    }
    println!("{e_seen:#?}\n{e_stats:#?}");
    let mut mismatches = Vec::new();
    for ((c, differs), (e, _)) in c.iter().zip(&e) {
        match differs {
            None if c != e => mismatches.push(format!("courier {c}\n  envoy {e}")),
            Some(why) if c == e => {
                mismatches.push(format!("expected to differ ({why}) but same: {c}"))
            }
            Some(why) => println!("DIFFERS ({why}):\n  courier {c}\n  envoy   {e}"),
            None => {}
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // DIFFERS: courier's retries of a body sent without a length carry `content-length`
    // (the replayed body's length is known; Envoy sends it as it came). A matter of the
    // router's retries, not of the gRPC filters: left out of the comparison.
    let unsized_retry = |seen: Vec<String>| -> Vec<String> {
        seen.into_iter()
            .map(|s| match s.starts_with("POST /retry.") {
                true => without_length(&s),
                false => s,
            })
            .collect()
    };
    assert_eq!(unsized_retry(c_seen), unsized_retry(e_seen));
    assert_eq!(c_stats, e_stats);
}
