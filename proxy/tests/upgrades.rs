//! Upgrades through the real binary: a WebSocket handshake forwarded to an
//! upstream that accepts it, then bytes both ways; upgrade types that are not
//! enabled get Envoy's 403 and the connection closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HANDSHAKE: &[u8] = b"GET /ws HTTP/1.1\r\nhost: example.com\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n";

/// Reads from `s` until `count` HTTP heads (`\r\n\r\n`) have arrived (bounded).
async fn read_heads(s: &mut TcpStream, count: usize) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..1000 {
        if out.windows(4).filter(|w| w == b"\r\n\r\n").count() >= count {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
            .await
            .expect("timed out")
            .unwrap();
        assert!(
            n > 0,
            "connection closed early: {}",
            String::from_utf8_lossy(&out)
        );
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads from `s` until `out` ends with `end` (bounded).
async fn read_until(s: &mut TcpStream, end: &[u8]) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..1000 {
        if out.ends_with(end) {
            break;
        }
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf))
            .await
            .expect("timed out")
            .unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A WebSocket-ish upstream: answers an upgrade with 101, sends back the request
/// head it received (so the test sees what was forwarded), then echoes bytes.
async fn upgrade_echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..100 {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let head = read_until(&mut s, b"\r\n\r\n").await;
                s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
                    .await
                    .unwrap();
                s.write_all(head.as_bytes()).await.unwrap();
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

const ROUTE: &str = "- match: {prefix: \"/\"}\n  route: {cluster: ws}\n";

#[tokio::test]
async fn websocket_is_forwarded_and_bytes_flow_both_ways() {
    let up = upgrade_echo().await;
    let c = courier(
        "upgrade_configs: [{upgrade_type: websocket}]",
        ROUTE,
        &static_cluster("ws", &[up], ""),
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(HANDSHAKE).await.unwrap();
    // The 101 and the upstream's echo of the request head may arrive in one read:
    // read both heads, then split them.
    let both = read_heads(&mut s, 2).await;
    let split = both.find("\r\n\r\n").map_or(both.len(), |i| i + 4);
    let (resp, echoed) = both.split_at(split);
    let resp_lc = resp.to_ascii_lowercase();
    assert!(
        resp.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{resp}"
    );
    assert!(resp_lc.contains("\r\nupgrade: websocket"), "{resp}");
    assert!(resp_lc.contains("\r\nconnection: upgrade"), "{resp}");
    assert!(resp_lc.contains("\r\nserver: envoy"), "{resp}");
    // As Envoy 1.40: no upstream service time on a 101.
    assert!(!resp_lc.contains("x-envoy-upstream-service-time"), "{resp}");
    assert!(resp_lc.contains("\r\nsec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="));
    // What the upstream received: the upgrade headers survived the hop.
    let seen = echoed.to_ascii_lowercase();
    assert!(seen.starts_with("get /ws http/1.1\r\n"), "{seen}");
    assert!(seen.contains("\r\nupgrade: websocket\r\n"), "{seen}");
    assert!(seen.contains("\r\nconnection: upgrade\r\n"), "{seen}");
    assert!(
        seen.contains("\r\nsec-websocket-key: dghlihnhbxbszsbub25jzq==\r\n"),
        "{seen}"
    );
    // Raw bytes (a masked WebSocket text frame and more) both ways.
    for msg in [
        &b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"[..],
        b"hello",
        b"world!",
    ] {
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, msg);
    }
    // Closing our side ends the tunnel.
    s.shutdown().await.unwrap();
    let rest = read_until(&mut s, b"\n--never--").await;
    assert_eq!(rest, "");
}

#[tokio::test]
async fn upgrades_not_enabled_get_403_and_close() {
    let up = upgrade_echo().await;
    let cluster = static_cluster("ws", &[up], "");
    for hcm in [
        "",
        "upgrade_configs: [{upgrade_type: websocket, enabled: false}]",
        "upgrade_configs: [{upgrade_type: h2c}]",
    ] {
        let c = courier(hcm, ROUTE, &cluster).await;
        let mut s = TcpStream::connect(c.listener).await.unwrap();
        s.write_all(HANDSHAKE).await.unwrap();
        let resp = read_until(&mut s, b"\n--never--").await;
        assert!(
            resp.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "{hcm}: {resp}"
        );
        assert!(resp.contains("\r\nconnection: close\r\n"), "{resp}");
        assert!(resp.contains("\r\ncontent-length: 0\r\n"), "{resp}");
        assert!(resp.ends_with("\r\n\r\n"), "{resp}");
    }
}

#[tokio::test]
async fn websocket_upgrade_on_a_connection_that_parked() {
    // A plain request, then quiet past the park delay (1 s): the connection's
    // HTTP/1.1 codec is ended and rebuilt when the handshake arrives.
    let up = upgrade_echo().await;
    let route = "- match: {path: \"/plain\"}\n  direct_response: {status: 200, body: {inline_string: plain}}\n- match: {prefix: \"/\"}\n  route: {cluster: ws}\n";
    let c = courier(
        "upgrade_configs: [{upgrade_type: websocket}]",
        route,
        &static_cluster("ws", &[up], ""),
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(b"GET /plain HTTP/1.1\r\nhost: example.com\r\n\r\n")
        .await
        .unwrap();
    let plain = read_until(&mut s, b"plain").await;
    assert!(plain.starts_with("HTTP/1.1 200 OK\r\n"), "{plain}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    s.write_all(HANDSHAKE).await.unwrap();
    let both = read_heads(&mut s, 2).await;
    assert!(
        both.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{both}"
    );
    assert!(
        both.to_ascii_lowercase()
            .contains("\r\n\r\nget /ws http/1.1\r\n"),
        "{both}"
    );
    for msg in [&b"hello"[..], b"world!"] {
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, msg);
    }
    s.shutdown().await.unwrap();
    assert_eq!(read_until(&mut s, b"\n--never--").await, "");
}

/// Route-level `upgrade_configs`: a route enables WebSocket where the
/// connection manager does not (forwarded, bytes both ways), another disables
/// it where the manager enables it (403, closed, counted), and a route that
/// says nothing follows the manager.
#[tokio::test]
async fn route_upgrade_configs_override_the_connection_manager() {
    let up = upgrade_echo().await;
    let cluster = static_cluster("ws", &[up], "");
    let routes = "- match: {prefix: \"/ws\"}\n  route: {cluster: ws, upgrade_configs: [{upgrade_type: WebSocket}]}\n\
                  - match: {prefix: \"/\"}\n  route: {cluster: ws}\n";
    let c = courier("", routes, &cluster).await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(HANDSHAKE).await.unwrap();
    let both = read_heads(&mut s, 2).await;
    assert!(
        both.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{both}"
    );
    s.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(3), s.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back, b"ping");
    // The same upgrade on the route that says nothing: the manager enables none.
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(&handshake_to("/other")).await.unwrap();
    let resp = read_until(&mut s, b"\n--never--").await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert!(resp.contains("\r\nconnection: close\r\n"), "{resp}");
    assert_eq!(
        stat(&c, "http.ingress.downstream_rq_ws_on_non_ws_route").await,
        1
    );

    let routes = "- match: {prefix: \"/ws\"}\n  route: {cluster: ws, upgrade_configs: [{upgrade_type: websocket, enabled: false}]}\n\
                  - match: {prefix: \"/\"}\n  route: {cluster: ws}\n";
    let c = courier(
        "upgrade_configs: [{upgrade_type: websocket}]",
        routes,
        &cluster,
    )
    .await;
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(HANDSHAKE).await.unwrap();
    let resp = read_until(&mut s, b"\n--never--").await;
    assert!(resp.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{resp}");
    assert_eq!(
        stat(&c, "http.ingress.downstream_rq_ws_on_non_ws_route").await,
        1
    );
    let mut s = TcpStream::connect(c.listener).await.unwrap();
    s.write_all(&handshake_to("/other")).await.unwrap();
    let both = read_heads(&mut s, 2).await;
    assert!(
        both.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{both}"
    );
}

/// [`HANDSHAKE`] for another path.
fn handshake_to(path: &str) -> Vec<u8> {
    String::from_utf8_lossy(HANDSHAKE)
        .replacen("GET /ws ", &format!("GET {path} "), 1)
        .into_bytes()
}
