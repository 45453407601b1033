//! jwt_authn with a remote JWKS through the real binary: the JWKS is served by a real
//! HTTP server on loopback reached through a courier STATIC cluster, and tokens are
//! minted with keys generated in the test (RSA, P-256, Ed25519).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod jwt_support;
mod support;

use jwt_support::*;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;

/// courier (one worker) with `filters`, a `web` echo upstream on every route and a
/// `jwks` cluster to `jwks`.
async fn start(filters: &str, jwks: SocketAddr) -> Courier {
    let up = echo_upstream("up").await;
    let clusters = format!(
        "{}{}",
        static_cluster("web", &[up], ""),
        static_cluster("jwks", &[jwks], "")
    );
    courier_filters(
        &["--concurrency", "1", "--drain-time-s", "1"],
        "",
        "",
        "- match: {prefix: \"/\"}\n  route: {cluster: web}\n",
        &clusters,
        filters,
    )
    .await
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

const P: &str = "http.ingress.jwt_authn.";

#[tokio::test]
async fn tokens_of_each_algorithm_verify_against_the_remote_jwks() {
    let (rsa, ec, ed) = (Key::rsa("r"), Key::p256("e"), Key::ed25519("d"));
    let (addr, jwks_state) = jwks_server(jwks(&[&rsa, &ec, &ed])).await;
    let c = start(&remote_filter(""), addr).await;
    let mut h1 = H1::connect(c.listener).await;
    for (key, sub) in [(&rsa, "rsa"), (&ec, "ec"), (&ed, "ed")] {
        let r = h1
            .get("/api", &[("authorization", &bearer(&key.token(sub)))])
            .await;
        assert_eq!(r.status, 200, "{sub}: {r:?}");
        assert_eq!(r.seen("x-jwt-sub"), Some(sub));
        assert_eq!(r.seen("authorization"), None, "token not forwarded");
    }
    // A token from a key the JWKS does not hold.
    let stranger = Key::p256("e");
    let r = h1
        .get("/api", &[("authorization", &bearer(&stranger.token("x")))])
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.body, "Jwt verification fails");
    // One fetch served every request (cache_duration defaults to 10 min).
    assert_eq!(jwks_state.fetches(), 1);
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_success")).await, 1);
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_failed")).await, 0);
    assert_eq!(stat(&c, &format!("{P}allowed")).await, 3);
    assert_eq!(stat(&c, &format!("{P}denied")).await, 1);
}

#[tokio::test]
async fn a_rotated_key_is_accepted_once_the_cached_jwks_expires() {
    let (old, new) = (Key::rsa("old"), Key::p256("new"));
    let (addr, jwks_state) = jwks_server(jwks(&[&old])).await;
    let c = start(&remote_filter("cache_duration: 1s"), addr).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get("/api", &[("authorization", &bearer(&old.token("a")))])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    // The issuer rotates: the JWKS now has only the new key.
    jwks_state.serve(jwks(&[&new]));
    let new_token = new.token("b");
    let mut accepted = false;
    for _ in 0..100 {
        let r = h1
            .get("/api", &[("authorization", &bearer(&new_token))])
            .await;
        if r.status == 200 {
            assert_eq!(r.seen("x-jwt-sub"), Some("b"));
            accepted = true;
            break;
        }
        // Until the cached set expires the new kid is unknown.
        assert_eq!(r.status, 401, "{r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(accepted, "the new key was never accepted");
    assert!(jwks_state.fetches() >= 2);
    // The old key left the set with the refetch.
    let r = h1
        .get("/api", &[("authorization", &bearer(&old.token("a")))])
        .await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(stat(&c, &format!("{P}jwks_fetch_success")).await >= 2);
}

#[tokio::test]
async fn jwks_endpoint_down_at_start_then_up() {
    let key = Key::ed25519("k");
    let addr = free_addr();
    let c = start(&remote_filter(""), addr).await;
    let mut h1 = H1::connect(c.listener).await;
    let token = key.token("a");
    let r = h1
        .get("/api?x=1", &[("authorization", &bearer(&token))])
        .await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(r.body, "Jwks remote fetch is failed");
    assert_eq!(
        r.header("www-authenticate"),
        Some(r#"Bearer realm="http://example.com/api?x=1", error="invalid_token""#)
    );
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_failed")).await, 1);
    // A failed fetch is not cached: each request tries again, as Envoy's on-demand fetch.
    let r = h1.get("/api", &[("authorization", &bearer(&token))]).await;
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_failed")).await, 2);

    let state = jwks_server_at(addr, jwks(&[&key])).await;
    let r = h1.get("/api", &[("authorization", &bearer(&token))]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(state.fetches(), 1);
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_success")).await, 1);
}

#[tokio::test]
async fn jwks_answering_non_200_or_garbage_fails_the_fetch() {
    let key = Key::p256("k");
    let (addr, state) = jwks_server(String::new()).await;
    let c = start(&remote_filter(""), addr).await;
    let mut h1 = H1::connect(c.listener).await;
    let token = key.token("a");
    let r = h1.get("/api", &[("authorization", &bearer(&token))]).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (401, "Jwks remote fetch is failed")
    );
    state.serve("{not a jwks".into());
    let r = h1.get("/api", &[("authorization", &bearer(&token))]).await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (401, "Jwks remote fetch is failed")
    );
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_failed")).await, 2);
    state.serve(jwks(&[&key]));
    let r = h1.get("/api", &[("authorization", &bearer(&token))]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(state.fetches(), 3);
}

#[tokio::test]
async fn a_slow_jwks_fetch_does_not_delay_another_route_on_the_same_worker() {
    let key = Key::rsa("k");
    let (addr, state) = jwks_server(jwks(&[&key])).await;
    state.set_open(false);
    let c = start(&remote_filter(""), addr).await;
    let listener = c.listener;
    let token = key.token("a");
    let waiting = tokio::spawn(async move {
        let mut h1 = H1::connect(listener).await;
        h1.get("/api", &[("authorization", &bearer(&token))]).await
    });
    // The fetch reached the JWKS server, which holds it.
    tokio::time::timeout(Duration::from_secs(10), state.arrived.notified())
        .await
        .unwrap();
    // The only worker still serves other requests meanwhile.
    let mut other = H1::connect(c.listener).await;
    let r = other.get("/free/x", &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!waiting.is_finished());
    state.set_open(true);
    let r = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, 200, "{r:?}");
}

#[tokio::test]
async fn concurrent_requests_share_one_fetch() {
    const N: u64 = 8;
    let key = Key::p256("k");
    let (addr, state) = jwks_server(jwks(&[&key])).await;
    state.set_open(false);
    let c = start(&remote_filter(""), addr).await;
    let mut tasks = Vec::new();
    for i in 0..N {
        let listener = c.listener;
        let token = key.token(&format!("u{i}"));
        tasks.push(tokio::spawn(async move {
            let mut h1 = H1::connect(listener).await;
            h1.get("/api", &[("authorization", &bearer(&token))]).await
        }));
    }
    // Hold the fetch until every request has reached courier.
    for _ in 0..500 {
        if stat(&c, "http.ingress.downstream_rq_total").await == N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(stat(&c, "http.ingress.downstream_rq_total").await, N);
    state.set_open(true);
    for t in tasks {
        let r = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert_eq!(state.fetches(), 1);
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_success")).await, 1);
    assert_eq!(stat(&c, &format!("{P}allowed")).await, N);
}

#[tokio::test]
async fn a_jwks_cluster_that_does_not_exist_fails_the_fetch() {
    // Envoy accepts the config and fails each fetch (FetchFailedMissingCluster).
    let key = Key::p256("k");
    let (addr, state) = jwks_server(jwks(&[&key])).await;
    let filter = remote_filter("").replace("cluster: jwks,", "cluster: nope,");
    let c = start(&filter, addr).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get("/api", &[("authorization", &bearer(&key.token("a")))])
        .await;
    assert_eq!(
        (r.status, r.body.as_str()),
        (401, "Jwks remote fetch is failed")
    );
    assert_eq!(state.fetches(), 0);
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_failed")).await, 1);
}

#[tokio::test]
async fn the_payload_is_forwarded_padded_when_asked() {
    let key = Key::ed25519("k");
    let (addr, _state) = jwks_server(jwks(&[&key])).await;
    let filter = remote_filter("").replace(
        "        remote_jwks:",
        "        forward_payload_header: x-jwt-payload\n        pad_forward_payload_header: true\n        remote_jwks:",
    );
    let c = start(&filter, addr).await;
    let mut h1 = H1::connect(c.listener).await;
    // Payloads of every length modulo 3, so some need padding.
    for sub in ["a", "ab", "abc"] {
        let token = key.token(sub);
        let payload = token.split('.').nth(1).unwrap();
        let padded = format!("{payload}{}", "=".repeat((4 - payload.len() % 4) % 4));
        let r = h1
            .get(
                "/api",
                &[
                    ("authorization", &bearer(&token)),
                    // A client cannot supply the header itself.
                    ("x-jwt-payload", "spoofed"),
                ],
            )
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.seen("x-jwt-payload"), Some(padded.as_str()), "{sub}");
        assert_eq!(r.body.matches("x-jwt-payload:").count(), 1);
    }
}
