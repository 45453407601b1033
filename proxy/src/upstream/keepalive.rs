//! HTTP/2 `connection_keepalive` on upstream connections, through hyper's
//! client keep-alive.
//!
//! Envoy and hyper differ, and courier follows hyper where it must:
//! - Envoy sends a PING every `interval` (plus up to `interval_jitter` percent,
//!   drawn again for each PING), counted from the previous ACK, whatever the
//!   connection's traffic. hyper sends one once nothing has been *read* for
//!   `interval`: on a connection that keeps receiving frames it sends none
//!   (the frames already prove the peer alive). An idle connection — the case
//!   keepalive is for — gets a PING every `interval` after the last ACK in both.
//! - The jitter is drawn once per connection (hyper's interval is fixed for
//!   the connection's life), not once per PING.
//! - Envoy restarts the ACK timeout on any frame received while it waits
//!   (an ACK stuck behind other frames does not close a busy connection);
//!   hyper counts it from the PING. hyper only pings a quiet connection, so
//!   the difference shows only when frames arrive after the PING but the ACK
//!   does not, within `timeout`.
//! - Both close the connection when the timeout passes; the streams on it
//!   fail (Envoy's `http2.keepalive_timeout` counter is not kept).
//! - Both ping connections without streams (hyper's `keep_alive_while_idle`).
//!
//! courier's own unary HTTP/2 calls (ext_authz, `envoy_grpc` services) run on
//! the `h2` crate directly, which gives the PINGs to the caller: there
//! [`ping_loop`] does as Envoy does (a PING every jittered `interval` after
//! the last ACK, whatever the traffic), but for the timeout's restart on other
//! frames.

use courier_config::cluster::Http2Keepalive;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::time::Duration;

/// Sets `keepalive` on a new connection's HTTP/2 builder.
pub fn apply(builder: &mut http2::Builder<TokioExecutor>, keepalive: Option<&Http2Keepalive>) {
    let Some(k) = keepalive else {
        return;
    };
    let Some(interval) = interval(k) else {
        return;
    };
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(interval)
        .keep_alive_timeout(k.timeout)
        .keep_alive_while_idle(true);
}

/// The PING interval of one connection: `interval` plus Envoy's jitter
/// (`random % (jitter% of interval)` milliseconds), drawn now; `None` without
/// periodic PINGs.
pub fn interval(k: &Http2Keepalive) -> Option<Duration> {
    let interval = k.interval?;
    let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    // Truncated as Envoy's integer arithmetic does.
    let jitter_mod = (k.interval_jitter_percent * ms as f64 / 100.0) as u64;
    let jitter = if jitter_mod > 0 {
        fastrand::u64(..jitter_mod)
    } else {
        0
    };
    Some(interval + Duration::from_millis(jitter))
}

/// Envoy's keepalive on an `h2` connection: returns when an ACK did not come
/// within `timeout` (or the connection is gone), and the caller then drops the
/// connection.
pub async fn ping_loop(mut pings: h2::PingPong, k: Http2Keepalive) {
    loop {
        let Some(every) = interval(&k) else {
            return std::future::pending().await;
        };
        tokio::time::sleep(every).await;
        match tokio::time::timeout(k.timeout, pings.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_envoy_s_bound() {
        let k = Http2Keepalive {
            interval: Some(Duration::from_secs(10)),
            timeout: Duration::from_secs(1),
            interval_jitter_percent: 15.0,
        };
        for _ in 0..1000 {
            let i = interval(&k).unwrap();
            assert!(i >= Duration::from_secs(10) && i < Duration::from_millis(11_500));
        }
        let none = Http2Keepalive {
            interval_jitter_percent: 0.0,
            ..k
        };
        assert_eq!(interval(&none), Some(Duration::from_secs(10)));
        assert_eq!(
            interval(&Http2Keepalive {
                interval: None,
                ..k
            }),
            None
        );
    }
}
