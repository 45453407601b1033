//! Remote JWKS through a fake fetcher (the proxy implements the real one).

use super::*;

/// A fetcher serving a fixed body (or failing), counting calls, slow enough that
/// concurrent requests overlap.
struct FakeFetcher {
    body: Option<String>,
    calls: AtomicUsize,
}

impl JwksFetcher for FakeFetcher {
    fn fetch<'a>(&'a self, uri: &'a HttpUri) -> FetchFuture<'a> {
        Box::pin(async move {
            assert_eq!(uri.cluster, "jwks_cluster");
            self.calls.fetch_add(1, Relaxed);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            self.body
                .clone()
                .map(bytes::Bytes::from)
                .ok_or_else(|| "503".to_string())
        })
    }
}

const REMOTE: &str = r#"
providers:
  a:
    issuer: https://issuer.example
    remote_jwks:
      http_uri: {uri: "http://jwks.example/keys", cluster: jwks_cluster, timeout: 1s}
      cache_duration: 300s
rules:
- match: {prefix: /}
  requires: {provider_name: a}
"#;

#[tokio::test(start_paused = true)]
async fn remote_jwks_is_fetched_once_shared_and_cached() {
    let fetcher = Arc::new(FakeFetcher {
        body: Some(jwks(&[rsa_key().jwk.clone()])),
        calls: AtomicUsize::new(0),
    });
    let f = jwt_with(REMOTE, Some(fetcher.clone()));
    let conn = plain_conn();
    let t = rsa_token(&good_claims());
    let auth = bearer(&t);
    let mut r1 = state(&conn, head("GET", "/x", &[("authorization", &auth)]));
    let mut r2 = state(&conn, head("GET", "/y", &[("authorization", &auth)]));
    let d1 = f.decode_headers(&mut r1, None);
    let d2 = f.decode_headers(&mut r2, None);
    let (Decision::Pending(p1), Decision::Pending(p2)) = (d1, d2) else {
        panic!("a request needing the JWKS must suspend");
    };
    let (v1, v2) = tokio::join!(p1, p2);
    assert!(matches!(v1, Verdict::Continue) && matches!(v2, Verdict::Continue));
    assert_eq!(fetcher.calls.load(Relaxed), 1);
    // Fresh keys: the next request does not suspend.
    let mut r3 = state(&conn, head("GET", "/z", &[("authorization", &auth)]));
    assert!(matches!(run_sync(&f, &mut r3, None), Verdict::Continue));
    // After cache_duration the keys are fetched again.
    tokio::time::advance(std::time::Duration::from_secs(301)).await;
    let mut r4 = state(&conn, head("GET", "/z", &[("authorization", &auth)]));
    assert!(matches!(run(&f, &mut r4, None).await, Verdict::Continue));
    assert_eq!(fetcher.calls.load(Relaxed), 2);
    assert_eq!(f.fetch_stats().success.load(Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn failed_remote_fetch_is_401_and_retried_by_the_next_request() {
    let fetcher = Arc::new(FakeFetcher {
        body: None,
        calls: AtomicUsize::new(0),
    });
    let f = jwt_with(REMOTE, Some(fetcher.clone()));
    let conn = plain_conn();
    let t = rsa_token(&good_claims());
    for n in 1..=2 {
        let mut req = state(
            &conn,
            head(
                "GET",
                "/x",
                &[("host", "h"), ("authorization", &bearer(&t))],
            ),
        );
        let r = reply(run(&f, &mut req, None).await);
        assert_eq!(
            (r.status.as_u16(), &r.body[..]),
            (401, &b"Jwks remote fetch is failed"[..])
        );
        assert_eq!(fetcher.calls.load(Relaxed), n);
    }
    // A request without a token needs no keys and does not fetch.
    let mut req = state(&conn, head("GET", "/x", &[]));
    assert_eq!(
        &reply(run_sync(&f, &mut req, None)).body[..],
        b"Jwt is missing"
    );
    assert_eq!(f.fetch_stats().failed.load(Relaxed), 2);
}

/// Fails the first `fail` fetches, then serves `body`.
struct Flaky {
    body: String,
    fail: usize,
    calls: AtomicUsize,
}

impl JwksFetcher for Flaky {
    fn fetch<'a>(&'a self, _: &'a HttpUri) -> FetchFuture<'a> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Relaxed);
            if n < self.fail {
                Err("connect failure".into())
            } else {
                Ok(bytes::Bytes::from(self.body.clone()))
            }
        })
    }
}

#[tokio::test(start_paused = true)]
async fn retry_policy_retries_with_backoff_and_async_fetch_prefetches() {
    let body = REMOTE.replace(
        "      cache_duration: 300s",
        "      cache_duration: 300s\n      async_fetch: {}\n      retry_policy: {num_retries: 2, retry_back_off: {base_interval: 1s, max_interval: 10s}}",
    );
    let fetcher = Arc::new(Flaky {
        body: jwks(&[rsa_key().jwk.clone()]),
        fail: 2,
        calls: AtomicUsize::new(0),
    });
    let f = jwt_with(&body, Some(fetcher.clone()));
    let start = tokio::time::Instant::now();
    let init = f.init().expect("async_fetch providers have start-up work");
    assert!(init.await);
    // Two failures, backing off 1 s then 2 s, then success.
    assert_eq!(fetcher.calls.load(Relaxed), 3);
    assert_eq!(start.elapsed().as_secs(), 3);
    let conn = plain_conn();
    let t = rsa_token(&good_claims());
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(run_sync(&f, &mut req, None), Verdict::Continue));
}

/// Serves `body`; every fetch after the first waits until `open` is notified.
struct Gated {
    body: String,
    calls: AtomicUsize,
    open: tokio::sync::Notify,
}

impl JwksFetcher for Gated {
    fn fetch<'a>(&'a self, _: &'a HttpUri) -> FetchFuture<'a> {
        Box::pin(async move {
            if self.calls.fetch_add(1, Relaxed) > 0 {
                self.open.notified().await;
            }
            Ok(bytes::Bytes::from(self.body.clone()))
        })
    }
}

/// `async_fetch` refreshes 5 s before expiry in the background; while that refresh is
/// under way requests keep verifying with the set at hand, without suspending.
#[tokio::test(start_paused = true)]
async fn background_refresh_keeps_the_last_keys_in_use() {
    let body = REMOTE.replace(
        "      cache_duration: 300s",
        "      cache_duration: 10s\n      async_fetch: {fast_listener: true}",
    );
    let fetcher = Arc::new(Gated {
        body: jwks(&[rsa_key().jwk.clone()]),
        calls: AtomicUsize::new(0),
        open: tokio::sync::Notify::new(),
    });
    let f = Arc::new(jwt_with(&body, Some(fetcher.clone())));
    assert!(f.init().is_none(), "fast_listener: nothing to wait for");
    let bg = Arc::clone(&f);
    let task = tokio::spawn(async move {
        let mut work = bg.background();
        assert_eq!(work.len(), 1);
        work.remove(0).await;
    });
    // The first fetch, then the refresh at 10 s - 5 s, which the fetcher holds.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(fetcher.calls.load(Relaxed), 2);
    let conn = plain_conn();
    let t = rsa_token(&good_claims());
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &bearer(&t))]));
    assert!(matches!(
        run_sync(f.as_ref(), &mut req, None),
        Verdict::Continue
    ));
    fetcher.open.notify_one();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(f.fetch_stats().success.load(Relaxed), 2);
    task.abort();
}
