//! The `upstream_proxy_protocol` transport socket: real Envoy and courier from
//! one bootstrap, the same requests on the same client connections, comparing
//! the PROXY headers their upstream connections start with (v1 and v2, for
//! HTTP routes and `tcp_proxy`) and which requests share an upstream connection.
//!
//! Envoy's rule: the header names the downstream connection (the client's
//! address, and the address it reached), and connections are pooled per
//! downstream connection, so two clients never share an upstream connection
//! while one client's keep-alive requests do.

// A test that cannot proceed should stop loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use courier_tests::differential::{bootstrap, hcm_listener, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::raw_http1::find;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

const VHOSTS: &str = r#"
- name: all
  domains: ["*"]
  routes:
  - { match: { prefix: "/v1" }, route: { cluster: v1 } }
  - { match: { prefix: "/v2" }, route: { cluster: v2 } }
"#;

fn cluster(name: &str, version: &str, up: SocketAddr) -> String {
    format!(
        "  - name: {name}
    connect_timeout: 2s
    transport_socket:
      name: envoy.transport_sockets.upstream_proxy_protocol
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.proxy_protocol.v3.ProxyProtocolUpstreamTransport
        config: {{ version: {version} }}
        transport_socket:
          name: envoy.transport_sockets.raw_buffer
          typed_config: {{ \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer }}
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
",
        port = up.port()
    )
}

fn config(up: SocketAddr) -> String {
    let tcp = r#"- name: tcp
  address:
    socket_address: { address: 127.0.0.1, port_value: 0 }
  filter_chains:
  - filters:
    - name: envoy.filters.network.tcp_proxy
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
        stat_prefix: tcp
        cluster: v2"#;
    let mut yaml = bootstrap(&[hcm_listener("http", "", VHOSTS), tcp.to_string()]);
    yaml.push_str("  clusters:\n");
    yaml.push_str(&cluster("v1", "V1", up));
    yaml.push_str(&cluster("v2", "V2", up));
    yaml
}

/// One request as the upstream saw it: its connection (numbered in accept
/// order), the connection's PROXY header, decoded, and the request's path.
#[derive(Debug)]
struct Seen {
    conn: usize,
    header: String,
    path: String,
}

/// An upstream that reads a PROXY header (v1 or v2) at the start of each
/// connection, then answers HTTP/1.1 requests `ok`, recording each.
fn upstream() -> (SocketAddr, mpsc::Receiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for (conn, s) in l.incoming().flatten().enumerate() {
            let tx = tx.clone();
            std::thread::spawn(move || serve(conn, s, &tx));
        }
    });
    (addr, rx)
}

fn serve(conn: usize, mut s: TcpStream, tx: &mpsc::Sender<Seen>) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let mut header = None;
    loop {
        if header.is_none()
            && let Some((h, used)) = proxy_header(&buf)
        {
            header = Some(h);
            buf.drain(..used);
        }
        if let Some(h) = &header
            && let Some(end) = find(&buf, b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            let _ = tx.send(Seen {
                conn,
                header: h.clone(),
                path,
            });
            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .is_err()
            {
                return;
            }
            continue;
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A whole PROXY header at the start of `buf`, described, and its length.
fn proxy_header(buf: &[u8]) -> Option<(String, usize)> {
    const V2: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
    if buf.starts_with(b"PROXY ") {
        let end = find(buf, b"\r\n")?;
        return Some((
            format!("v1 {}", String::from_utf8_lossy(&buf[..end])),
            end + 2,
        ));
    }
    if buf.len() < 16 {
        return None;
    }
    assert!(buf.starts_with(V2), "no PROXY header: {buf:?}");
    let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if buf.len() < len {
        return None;
    }
    let body = &buf[16..len];
    let text = match (buf[12], buf[13]) {
        (0x20, _) => "v2 LOCAL".to_string(),
        (0x21, 0x11) => {
            let ip = |b: &[u8]| std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
            format!(
                "v2 PROXY TCP4 {}:{} {}:{}",
                ip(&body[0..4]),
                port(&body[8..10]),
                ip(&body[4..8]),
                port(&body[10..12])
            )
        }
        (cmd, family) => format!("v2 command {cmd:#x} family {family:#x}"),
    };
    Some((text, len))
}

/// Sends `paths` as keep-alive GETs on one connection; returns the
/// connection's local port once every answer is read.
fn client(addr: &str, paths: &[&str]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for path in paths {
        write!(s, "GET {path} HTTP/1.1\r\nhost: t\r\n\r\n").unwrap();
        let mut got = Vec::new();
        while !got.ends_with(b"ok") {
            let mut chunk = [0u8; 1024];
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed before the answer to {path}");
            got.extend_from_slice(&chunk[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 200"), "{path}: {got:?}");
    }
    s.local_addr().unwrap().port()
}

/// One proxy's upstream view: per request, its upstream connection (renamed
/// in order of first use) and header, with the client and listener ports named.
fn observe(kind: Kind, bin: &std::path::Path) -> Vec<String> {
    let (up, rx) = upstream();
    let proxy = Proxy::start(kind, bin, &config(up), &["http", "tcp"])
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    let http = proxy.listener("http").unwrap();
    let tcp = proxy.listener("tcp").unwrap();
    let a = client(http, &["/v1/a1", "/v1/a2", "/v2/a3"]);
    let b = client(http, &["/v1/b1", "/v2/b2"]);
    let c = client(tcp, &["/t1", "/t2"]);
    let mut seen: Vec<Seen> = (0..7)
        .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    seen.sort_by(|x, y| x.path.cmp(&y.path));
    let mut conns = Vec::new();
    let port = |p: &str| p.parse::<u16>().ok();
    let name_ports = |h: &str| {
        h.split([' ', ':'])
            .map(|w| match port(w) {
                Some(p) if p == a => "<client a>".to_string(),
                Some(p) if p == b => "<client b>".to_string(),
                Some(p) if p == c => "<client c>".to_string(),
                Some(p) if http.ends_with(&format!(":{p}")) => "<http listener>".to_string(),
                Some(p) if tcp.ends_with(&format!(":{p}")) => "<tcp listener>".to_string(),
                _ => w.to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    seen.iter()
        .map(|s| {
            let n = conns.iter().position(|c| *c == s.conn).unwrap_or_else(|| {
                conns.push(s.conn);
                conns.len() - 1
            });
            format!(
                "{} on upstream connection {n}: {}",
                s.path,
                name_ports(&s.header)
            )
        })
        .collect()
}

#[test]
fn upstream_proxy_protocol_names_each_downstream_connection_as_envoy_does() {
    let Some(courier_lines) = same_lines(observe) else {
        return;
    };
    // What Envoy does, spelled out, so the comparison cannot pass on two wrong answers.
    let expected = [
        "/t1 on upstream connection 0: v2 PROXY TCP4 127.0.0.1 <client c> 127.0.0.1 <tcp listener>",
        "/t2 on upstream connection 0: v2 PROXY TCP4 127.0.0.1 <client c> 127.0.0.1 <tcp listener>",
        "/v1/a1 on upstream connection 1: v1 PROXY TCP4 127.0.0.1 127.0.0.1 <client a> <http listener>",
        "/v1/a2 on upstream connection 1: v1 PROXY TCP4 127.0.0.1 127.0.0.1 <client a> <http listener>",
        "/v1/b1 on upstream connection 2: v1 PROXY TCP4 127.0.0.1 127.0.0.1 <client b> <http listener>",
        "/v2/a3 on upstream connection 3: v2 PROXY TCP4 127.0.0.1 <client a> 127.0.0.1 <http listener>",
        "/v2/b2 on upstream connection 4: v2 PROXY TCP4 127.0.0.1 <client b> 127.0.0.1 <http listener>",
    ];
    assert_eq!(courier_lines, expected);
}
