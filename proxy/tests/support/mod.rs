//! Helpers for tests that run the real `courier` binary in front of real upstream
//! servers on loopback: an echo upstream (HTTP/1.1 and h2c on one port) that
//! reports what it received, a courier process with every port 0, and small
//! HTTP/1.1 and HTTP/2 clients.

#![allow(dead_code)]

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

pub mod programmable;
pub mod tls_upstream;

/// An echo upstream: answers 200 with `x-upstream: <name>`, and a body listing
/// what it saw: `<METHOD> <path> <version>` then one `name: value` line per header.
/// `/slow` waits 2 s first; `/status/<n>` answers with status n.
pub async fn echo_upstream(name: &str) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let name = name.to_string();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let name = name.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    let name = name.clone();
                    async move { Ok::<_, hyper::Error>(echo(req, &name).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

type EchoBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

async fn echo(req: Request<Incoming>, name: &str) -> Response<EchoBody> {
    let mut text = format!(
        "{} {} {:?}\n",
        req.method(),
        req.uri().path_and_query().map_or("", |p| p.as_str()),
        req.version()
    );
    for (k, v) in req.headers() {
        text.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
    }
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    text.push_str(&format!("body: {}\n", String::from_utf8_lossy(&body)));
    if path == "/slow" {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let status = path
        .strip_prefix("/status/")
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let body = Full::new(Bytes::from(text));
    // `/trailers` ends with gRPC-style trailers.
    let body = if path.ends_with("/trailers") {
        body.with_trailers(async {
            let mut t = http::HeaderMap::new();
            t.insert("grpc-status", http::HeaderValue::from_static("0"));
            Some(Ok(t))
        })
        .boxed()
    } else {
        body.boxed()
    };
    Response::builder()
        .status(status)
        .header("x-upstream", name)
        .body(body)
        .unwrap()
}

/// A running courier; killed on drop.
pub struct Courier {
    child: Child,
    /// Admin address.
    pub admin: String,
    /// The listener's address.
    pub listener: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Courier {
    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The exit status, once courier has exited; polls every 20 ms, `tries` times.
    pub async fn wait_exit(&mut self, tries: u32) -> Option<std::process::ExitStatus> {
        for _ in 0..tries {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for Courier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts courier with one listener (port 0) whose HCM has `hcm_extra` (YAML at
/// the HCM's indentation) and `routes` (the virtual host's `routes:` list at its
/// indentation), and the given `clusters:` list.
pub async fn courier(hcm_extra: &str, routes: &str, clusters: &str) -> Courier {
    courier_with(hcm_extra, "", routes, clusters).await
}

/// Like [`courier`], with `vhost_extra` added to the virtual host.
pub async fn courier_with(
    hcm_extra: &str,
    vhost_extra: &str,
    routes: &str,
    clusters: &str,
) -> Courier {
    courier_args(
        &["--concurrency", "1", "--drain-time-s", "1"],
        hcm_extra,
        vhost_extra,
        routes,
        clusters,
    )
    .await
}

/// Like [`courier_with`], with these command-line `args` (before `-c`).
pub async fn courier_args(
    args: &[&str],
    hcm_extra: &str,
    vhost_extra: &str,
    routes: &str,
    clusters: &str,
) -> Courier {
    courier_filters(args, hcm_extra, vhost_extra, routes, clusters, "").await
}

/// Like [`courier_args`], with `http_filters` (a YAML list) before the router.
pub async fn courier_filters(
    args: &[&str],
    hcm_extra: &str,
    vhost_extra: &str,
    routes: &str,
    clusters: &str,
    http_filters: &str,
) -> Courier {
    courier_top(
        args,
        "",
        hcm_extra,
        vhost_extra,
        routes,
        clusters,
        http_filters,
    )
    .await
}

/// Like [`courier_filters`], with `top` (YAML) added at the bootstrap's top level.
pub async fn courier_top(
    args: &[&str],
    top: &str,
    hcm_extra: &str,
    vhost_extra: &str,
    routes: &str,
    clusters: &str,
    http_filters: &str,
) -> Courier {
    let config = format!(
        r#"
{top}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
{hcm}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
{vhost}
              routes:
{routes}
          http_filters:
{filters}          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
{clusters}
"#,
        hcm = indent(hcm_extra, 10),
        vhost = indent(vhost_extra, 14),
        routes = indent(routes, 14),
        clusters = indent(clusters, 2),
        filters = indent(http_filters, 10),
    );
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("courier.yaml");
    std::fs::write(&config_path, &config).unwrap();
    let admin_path = dir.path().join("admin");
    let child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .arg("-c")
        .arg(&config_path)
        .arg("--admin-address-path")
        .arg(&admin_path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut c = Courier {
        child,
        admin: String::new(),
        listener: "127.0.0.1:0".parse().unwrap(),
        _dir: dir,
    };
    for _ in 0..500 {
        if let Ok(a) = std::fs::read_to_string(&admin_path)
            && !a.is_empty()
        {
            c.admin = a;
            break;
        }
        if let Ok(Some(status)) = c.child.try_wait() {
            panic!("courier exited with {status}; config:\n{config}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !c.admin.is_empty(),
        "courier did not start; config:\n{config}"
    );
    let listeners = get_text(&c.admin, "/listeners").await;
    let line = listeners
        .lines()
        .find_map(|l| l.strip_prefix("ingress::"))
        .unwrap();
    c.listener = line.parse().unwrap();
    c
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
}

/// A STATIC cluster over `hosts` (YAML list item), with `extra` cluster fields.
pub fn static_cluster(name: &str, hosts: &[SocketAddr], extra: &str) -> String {
    let endpoints: String = hosts
        .iter()
        .map(|h| {
            format!(
                "      - endpoint: {{address: {{socket_address: {{address: {}, port_value: {}}}}}}}\n",
                h.ip(),
                h.port()
            )
        })
        .collect();
    format!(
        "- name: {name}\n  connect_timeout: 1s\n{extra}  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n{endpoints}",
        extra = indent(extra, 2)
    )
}

/// A keep-alive HTTP/1.1 client connection.
pub struct H1(pub hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl H1 {
    /// Connects.
    pub async fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .unwrap();
        tokio::spawn(conn);
        H1(send)
    }

    /// Sends a GET with `headers`.
    pub async fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut req = Request::get(path).header("host", "example.com");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Full::default()).unwrap()).await
    }

    /// Sends a request.
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Reply {
        self.0.ready().await.unwrap();
        let resp = self.0.send_request(req).await.unwrap();
        Reply::read(resp).await
    }
}

/// A prior-knowledge h2c client connection.
pub struct H2(pub hyper::client::conn::http2::SendRequest<Full<Bytes>>);

impl H2 {
    /// Connects.
    pub async fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).await.unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(s))
                .await
                .unwrap();
        tokio::spawn(conn);
        H2(send)
    }

    /// Sends a request.
    pub async fn send(&mut self, req: Request<Full<Bytes>>) -> Reply {
        let resp = self.0.send_request(req).await.unwrap();
        Reply::read(resp).await
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body as text.
    pub body: String,
    /// Trailers, if any.
    pub trailers: Option<http::HeaderMap>,
}

impl Reply {
    async fn read(resp: Response<Incoming>) -> Self {
        let (parts, body) = resp.into_parts();
        let collected = body.collect().await.unwrap();
        let trailers = collected.trailers().cloned();
        Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: String::from_utf8_lossy(&collected.to_bytes()).into_owned(),
            trailers,
        }
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The value of a header the echo upstream saw (first line with that name).
    pub fn seen(&self, name: &str) -> Option<&str> {
        let prefix = format!("{name}: ");
        self.body
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
    }

    /// The echo's request line (`GET /path HTTP/1.1`).
    pub fn seen_request_line(&self) -> &str {
        self.body.lines().next().unwrap_or("")
    }
}

/// GETs `path` from admin as text.
pub async fn get_text(addr: &str, path: &str) -> String {
    let mut c = H1::connect(addr.parse().unwrap()).await;
    c.get(path, &[]).await.body
}

/// A counter from admin's `/stats` (0 when absent).
pub async fn stat(c: &Courier, name: &str) -> u64 {
    let text = get_text(&c.admin, "/stats").await;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}
