//! The authorization servers and upstream shared by Envoy and courier in the ext_authz
//! differential test, on a tokio runtime of their own: every answer depends only on the
//! request (its `x-mode` header), so both proxies get the same ones — except under
//! `x-flaky` (see [`flaky`]), whose answers depend on how many checks came before.

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::config::core::v3::{HeaderValue, HeaderValueOption, QueryParameter};
use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::Status;
use tonic::codegen::Service;

/// Addresses of the servers.
pub struct Servers {
    /// gRPC Authorization (h2c).
    pub grpc: SocketAddr,
    /// HTTP authz (HTTP/1.1).
    pub http: SocketAddr,
    /// The upstream: answers with the method, path, `x-t-*` headers and body length.
    pub upstream: SocketAddr,
    /// A port nothing listens on.
    pub closed: SocketAddr,
}

/// Checks counted per `x-flaky` slot (both servers).
static CHECKS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

/// How many checks carried `x-flaky` slot `slot` so far.
#[allow(dead_code)]
pub fn checks(slot: usize) -> usize {
    CHECKS.get(slot).map_or(0, |c| c.load(Ordering::SeqCst))
}

/// What a flaky check gets.
enum Flaky {
    /// This answer (an HTTP status, or a gRPC code for the gRPC server).
    Fail(u16),
    /// Nothing for 1 s, then the usual answer.
    Slow,
    /// The usual answer.
    Pass,
}

/// `x-flaky: <slot>:<n>:<what>`: the first `n` checks of the slot (counted here) get
/// `what` (`slow`, or a status / gRPC code), the later ones the usual answer.
fn flaky(header: Option<&str>) -> Flaky {
    let Some(spec) = header else {
        return Flaky::Pass;
    };
    let mut parts = spec.split(':');
    let (Some(slot), Some(n), Some(what)) = (
        parts.next().and_then(|s| s.parse::<usize>().ok()),
        parts.next().and_then(|s| s.parse::<usize>().ok()),
        parts.next(),
    ) else {
        return Flaky::Pass;
    };
    let Some(counter) = CHECKS.get(slot) else {
        return Flaky::Pass;
    };
    if counter.fetch_add(1, Ordering::SeqCst) >= n {
        return Flaky::Pass;
    }
    match what {
        "slow" => Flaky::Slow,
        code => code.parse().map_or(Flaky::Pass, Flaky::Fail),
    }
}

fn hvo(k: &str, v: &str, append: Option<bool>, action: HeaderAppendAction) -> HeaderValueOption {
    #[allow(deprecated)]
    HeaderValueOption {
        header: Some(HeaderValue {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        }),
        append: append.map(|value| envoy_types::pb::google::protobuf::BoolValue { value }),
        append_action: action as i32,
        ..Default::default()
    }
}

fn set(k: &str, v: &str) -> HeaderValueOption {
    hvo(k, v, Some(false), HeaderAppendAction::AppendIfExistsOrAdd)
}

fn rpc(code: i32) -> Option<RpcStatus> {
    Some(RpcStatus {
        code,
        message: String::new(),
        details: vec![],
    })
}

struct Auth;

#[tonic::async_trait]
impl Authorization for Auth {
    async fn check(
        &self,
        request: tonic::Request<CheckRequest>,
    ) -> Result<tonic::Response<CheckResponse>, Status> {
        let attributes = request.into_inner().attributes;
        // What the check carried as route metadata: `none` (field absent) or
        // `ns{key=value,..}` per namespace, sorted.
        let route_context = match attributes
            .as_ref()
            .and_then(|a| a.route_metadata_context.as_ref())
        {
            None => "none".to_string(),
            Some(m) => {
                let mut out: Vec<String> = m
                    .filter_metadata
                    .iter()
                    .map(|(ns, s)| {
                        let mut fields: Vec<String> = s
                            .fields
                            .iter()
                            .map(|(k, v)| format!("{k}={:?}", v.kind))
                            .collect();
                        fields.sort();
                        format!("{ns}{{{}}}", fields.join(","))
                    })
                    .collect();
                out.sort();
                format!("[{}]", out.join(";"))
            }
        };
        let headers = attributes
            .and_then(|a| a.request)
            .and_then(|r| r.http)
            .map(|h| h.headers)
            .unwrap_or_default();
        match flaky(headers.get("x-flaky").map(String::as_str)) {
            Flaky::Fail(code) => return Err(Status::new(i32::from(code).into(), "flaky")),
            Flaky::Slow => tokio::time::sleep(Duration::from_secs(1)).await,
            Flaky::Pass => {}
        }
        let mode = headers.get("x-mode").cloned().unwrap_or_default();
        let ok = |ok: OkHttpResponse| CheckResponse {
            status: rpc(0),
            http_response: Some(HttpResponse::OkResponse(ok)),
            ..Default::default()
        };
        let resp = match mode.as_str() {
            "deny" => CheckResponse {
                status: rpc(7),
                http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
                    status: Some(HttpStatus { code: 401 }),
                    headers: vec![set("x-t-deny", "yes")],
                    body: "go away".into(),
                })),
                ..Default::default()
            },
            "deny-bare" => CheckResponse {
                status: rpc(7),
                ..Default::default()
            },
            "unavailable" => return Err(Status::unavailable("down")),
            "route-context" => ok(OkHttpResponse {
                headers: vec![set("x-t-route-context", &route_context)],
                ..Default::default()
            }),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                ok(OkHttpResponse::default())
            }
            "remove" => ok(OkHttpResponse {
                headers_to_remove: vec!["x-t-secret".into(), ":path".into(), "host".into()],
                ..Default::default()
            }),
            "query" => ok(OkHttpResponse {
                query_parameters_to_set: vec![QueryParameter {
                    key: "k".into(),
                    value: "v".into(),
                }],
                query_parameters_to_remove: vec!["drop".into()],
                ..Default::default()
            }),
            "response-headers" => ok(OkHttpResponse {
                response_headers_to_add: vec![
                    hvo(
                        "x-r-unset",
                        "authz",
                        None,
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                    hvo(
                        "x-r-set",
                        "authz",
                        Some(false),
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                    hvo(
                        "x-r-add",
                        "authz",
                        Some(true),
                        HeaderAppendAction::OverwriteIfExists,
                    ),
                    hvo("x-r-absent", "authz", None, HeaderAppendAction::AddIfAbsent),
                    hvo(
                        "x-r-absent-new",
                        "authz",
                        None,
                        HeaderAppendAction::AddIfAbsent,
                    ),
                    hvo(
                        "x-r-over",
                        "authz",
                        None,
                        HeaderAppendAction::OverwriteIfExists,
                    ),
                    hvo(
                        "x-r-over-new",
                        "authz",
                        None,
                        HeaderAppendAction::OverwriteIfExists,
                    ),
                    hvo(
                        "x-r-set-add",
                        "authz",
                        None,
                        HeaderAppendAction::OverwriteIfExistsOrAdd,
                    ),
                    hvo(
                        "x-r-set-add-new",
                        "authz",
                        None,
                        HeaderAppendAction::OverwriteIfExistsOrAdd,
                    ),
                    hvo(
                        "x-r-twice",
                        "one",
                        None,
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                    hvo(
                        "x-r-twice",
                        "two",
                        Some(false),
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                ],
                ..Default::default()
            }),
            "append" => ok(OkHttpResponse {
                headers: vec![
                    hvo(
                        "x-t-a",
                        "more",
                        Some(true),
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                    hvo(
                        "x-t-absent",
                        "x",
                        Some(true),
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                    hvo("x-t-b", "if-absent", None, HeaderAppendAction::AddIfAbsent),
                    hvo("x-t-c", "over", None, HeaderAppendAction::OverwriteIfExists),
                    hvo("x-t-d", "over", None, HeaderAppendAction::OverwriteIfExists),
                    hvo(
                        "x-t-e",
                        "default",
                        None,
                        HeaderAppendAction::AppendIfExistsOrAdd,
                    ),
                    hvo(
                        "x-t-f",
                        "set",
                        None,
                        HeaderAppendAction::OverwriteIfExistsOrAdd,
                    ),
                ],
                ..Default::default()
            }),
            _ => {
                let mut md = envoy_types::pb::google::protobuf::Struct::default();
                md.fields.insert(
                    "user".into(),
                    envoy_types::pb::google::protobuf::Value {
                        kind: Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(
                            "alice".into(),
                        )),
                    },
                );
                CheckResponse {
                    dynamic_metadata: Some(md),
                    ..ok(OkHttpResponse {
                        headers: vec![set("x-t-user", "alice")],
                        response_headers_to_add: vec![set("x-t-resp", "r1")],
                        ..Default::default()
                    })
                }
            }
        };
        Ok(tonic::Response::new(resp))
    }
}

async fn grpc_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let svc = AuthorizationServer::new(Auth);
    tokio::spawn(async move {
        for _ in 0..10_000 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let svc = svc.clone();
            let service = service_fn(move |req: Request<Incoming>| {
                let mut svc = svc.clone();
                async move { svc.call(req).await }
            });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(s), service),
            );
        }
    });
    addr
}

fn http_answer(mode: &str) -> Response<Full<Bytes>> {
    let b = Response::builder();
    let r = match mode {
        "deny" => b
            .status(403)
            .header("x-t-deny", "yes")
            .header("content-type", "text/x-deny")
            .body(Full::new(Bytes::from("nope"))),
        "unauthorized" => b
            .status(401)
            .header("www-authenticate", "Bearer")
            .header("x-t-other", "o")
            .body(Full::new(Bytes::new())),
        "redirect" => b
            .status(302)
            .header("location", "http://login.test/")
            .body(Full::new(Bytes::new())),
        "created" => b.status(201).body(Full::new(Bytes::from("created"))),
        "error" => b.status(500).body(Full::new(Bytes::from("broken"))),
        _ => b
            .header("x-t-user", "bob")
            .header("x-t-append", "a2")
            .header("x-t-resp", "r2")
            .header("x-envoy-auth-headers-to-remove", "x-t-secret")
            .body(Full::new(Bytes::new())),
    };
    r.unwrap()
}

async fn http_server() -> SocketAddr {
    serve_h1(|req| {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let mode = header("x-mode").unwrap_or_default();
        let flaky = flaky(header("x-flaky").as_deref());
        async move {
            match flaky {
                Flaky::Fail(status) => {
                    let mut r = Response::new(Full::new(Bytes::from("flaky")));
                    *r.status_mut() =
                        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
                    return r;
                }
                Flaky::Slow => tokio::time::sleep(Duration::from_secs(1)).await,
                Flaky::Pass => {}
            }
            http_answer(&mode)
        }
    })
    .await
}

async fn upstream() -> SocketAddr {
    serve_h1(|req: Request<Incoming>| async move {
        let mut text = format!("{} {}\n", req.method(), req.uri());
        let mut seen: Vec<String> = req
            .headers()
            .iter()
            .filter(|(k, _)| {
                k.as_str().starts_with("x-t-") || k.as_str().starts_with("x-envoy-auth")
            })
            .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("?")))
            .collect();
        seen.sort();
        text.extend(seen);
        // `x-up-headers: k=v,k=v` become response headers (for response_headers_to_add).
        let extra: Vec<(String, String)> = req
            .headers()
            .get("x-up-headers")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        text.push_str(&format!("body: {}\n", String::from_utf8_lossy(&body)));
        let mut resp = Response::new(Full::new(Bytes::from(text)));
        for (k, v) in extra {
            resp.headers_mut().append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(&v).unwrap(),
            );
        }
        resp
    })
    .await
}

async fn serve_h1<F, Fut>(f: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Full<Bytes>>> + Send,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..10_000 {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let f = f.clone();
            let service = service_fn(move |req| {
                let f = f.clone();
                async move { Ok::<_, hyper::Error>(f(req).await) }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), service)
                    .await;
            });
        }
    });
    addr
}

/// Starts the servers on a runtime thread that lives as long as the test process.
pub fn start() -> Servers {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let closed = {
                let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
                l.local_addr().unwrap()
            };
            let servers = Servers {
                grpc: grpc_server().await,
                http: http_server().await,
                upstream: upstream().await,
                closed,
            };
            tx.send(servers).unwrap();
            std::future::pending::<()>().await;
        });
    });
    rx.recv().unwrap()
}
