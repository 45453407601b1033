//! jwt_authn `async_fetch` through the real binary: the remote JWKS is fetched at start-up
//! on the main thread (the listener waits for it unless `fast_listener`), refetched
//! `failed_refetch_duration` after a failure and before the cached set expires, without
//! a request asking.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod jwt_support;
mod support;

use jwt_support::*;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;

async fn start(filters: String, jwks: SocketAddr) -> Courier {
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
        &filters,
    )
    .await
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

const P: &str = "http.ingress.jwt_authn.";

/// Polls `name` until it reaches `at_least` (bounded: 10 s).
async fn wait_stat(c: &Courier, name: &str, at_least: u64) -> u64 {
    for _ in 0..200 {
        let v = stat(c, name).await;
        if v >= at_least {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} never reached {at_least}");
}

#[tokio::test]
async fn the_listener_waits_for_the_first_fetch_without_fast_listener() {
    let key = Key::rsa("k");
    let (addr, state) = jwks_server(jwks(&[&key])).await;
    state.set_open(false);
    let starting = tokio::spawn(start(remote_filter("async_fetch: {}"), addr));
    // courier fetches at start-up, before any request.
    tokio::time::timeout(Duration::from_secs(10), state.arrived.notified())
        .await
        .unwrap();
    assert_eq!(state.fetches(), 1);
    assert!(
        !starting.is_finished(),
        "courier started before the fetch ended"
    );
    state.set_open(true);
    let c = starting.await.unwrap();
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_success")).await, 1);
    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get("/api", &[("authorization", &bearer(&key.token("a")))])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    // The request found the keys at hand.
    assert_eq!(state.fetches(), 1);
}

#[tokio::test]
async fn fast_listener_serves_at_once_and_refetches_after_a_failure() {
    let key = Key::p256("k");
    // The JWKS endpoint fails (503) at start.
    let (addr, state) = jwks_server(String::new()).await;
    let filter = remote_filter(
        "cache_duration: 600s\nasync_fetch: {fast_listener: true, failed_refetch_duration: 0.2s}",
    );
    let c = start(filter, addr).await;
    wait_stat(&c, &format!("{P}jwks_fetch_failed"), 1).await;
    state.serve(jwks(&[&key]));
    // Refetched after failed_refetch_duration, no request needed.
    wait_stat(&c, &format!("{P}jwks_fetch_success"), 1).await;
    let fetches = state.fetches();
    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get("/api", &[("authorization", &bearer(&key.token("a")))])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(state.fetches(), fetches, "the request did not fetch");
}

#[tokio::test]
async fn the_jwks_is_refreshed_before_it_expires() {
    let (old, new) = (Key::rsa("old"), Key::ed25519("new"));
    let (addr, state) = jwks_server(jwks(&[&old])).await;
    // Envoy refetches 5 s before expiry: here 1 s after each success.
    let c = start(remote_filter("cache_duration: 6s\nasync_fetch: {}"), addr).await;
    assert_eq!(stat(&c, &format!("{P}jwks_fetch_success")).await, 1);
    state.serve(jwks(&[&new]));
    wait_stat(&c, &format!("{P}jwks_fetch_success"), 2).await;
    let mut h1 = H1::connect(c.listener).await;
    let r = h1
        .get("/api", &[("authorization", &bearer(&new.token("b")))])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.seen("x-jwt-sub"), Some("b"));
    // Every fetch was a background one (one more may be under way right now).
    let success = stat(&c, &format!("{P}jwks_fetch_success")).await;
    assert!(
        state.fetches() <= success + 1,
        "{} > {success} + 1",
        state.fetches()
    );
}
