//! Retries of ext_authz's checks under a core `RetryPolicy` (the HTTP service's, or an
//! `envoy_grpc` service's), as Envoy's async client runs them through its router: the
//! router's rules for which outcomes retry, the retry count and the jittered exponential
//! back-off, each attempt bounded by the policy's per-try timeout (its `max_interval`).
//! The check's own timeout bounds the whole: the filter wraps the call in it.

use crate::attempt::retry::{self, Decision, Outcome};
use crate::upstream::client::ClientError;
use crate::upstream::pool::SendError;
use crate::upstream::unary::UnaryResponse;
use bytes::Bytes;
use courier_config::filters::http_uri::CallRetryPolicy;
use http::HeaderMap;
use std::future::Future;

/// What the retry rules look at in an attempt's answer.
pub(crate) trait Answer {
    /// The HTTP status.
    fn status(&self) -> u16;
    /// The response headers (a trailers-only gRPC answer has its `grpc-status` here).
    fn headers(&self) -> &HeaderMap;
}

impl Answer for http::Response<Bytes> {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
}

impl Answer for UnaryResponse {
    fn status(&self) -> u16 {
        self.head.status.as_u16()
    }
    fn headers(&self) -> &HeaderMap {
        &self.head.headers
    }
}

/// Runs `attempt` once without a policy; with one, again after each retriable outcome
/// while retries are left, waiting the back-off in between (tokio's clock). The last
/// outcome is returned: a retriable response once the retries are spent, as Envoy's
/// router passes it on.
pub(crate) async fn run<T, F, Fut>(
    policy: Option<&CallRetryPolicy>,
    mut attempt: F,
) -> Result<T, ClientError>
where
    T: Answer,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let Some(policy) = policy else {
        return attempt().await;
    };
    let mut state = retry::for_call(policy);
    let per_try = policy.per_try_timeout();
    loop {
        let result = tokio::time::timeout(per_try, attempt())
            .await
            .unwrap_or(Err(ClientError::Timeout));
        let retriable = match &result {
            Ok(answer) => state.retriable(Outcome::Response(answer.status(), answer.headers())),
            // Envoy's router never retries a circuit breaker's refusal.
            Err(ClientError::Send(SendError::Overflow | SendError::PoolOverflow)) => false,
            Err(ClientError::Send(e)) => state.retriable(Outcome::Failed(e)),
            Err(ClientError::Timeout) => state.retriable(Outcome::PerTryTimeout),
            // No cluster or host: Envoy answers locally, without a retry.
            Err(_) => false,
        };
        if !retriable {
            return result;
        }
        match state.next(None) {
            Decision::LimitExceeded => return result,
            Decision::Retry(wait, _) => tokio::time::sleep(wait).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_config::route::{RetryBackOff, RetryOn};
    use std::cell::Cell;
    use std::time::Duration;

    fn policy(on: RetryOn, num_retries: u32) -> CallRetryPolicy {
        CallRetryPolicy {
            retry_on: on,
            num_retries,
            back_off: RetryBackOff {
                base_interval: Duration::from_millis(200),
                max_interval: Duration::from_secs(3),
            },
        }
    }

    fn answer(status: u16) -> http::Response<Bytes> {
        let mut r = http::Response::new(Bytes::new());
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
        r
    }

    /// Answers `statuses` in turn (the last one from then on), counting the attempts.
    async fn attempts(policy: Option<&CallRetryPolicy>, statuses: &[u16]) -> (u16, usize) {
        let n = Cell::new(0usize);
        let r = run(policy, || {
            let i = n.get();
            n.set(i + 1);
            let s = statuses[i.min(statuses.len() - 1)];
            async move { Ok::<_, ClientError>(answer(s)) }
        })
        .await;
        (r.map_or(0, |a| a.status().as_u16()), n.get())
    }

    #[tokio::test(start_paused = true)]
    async fn retries_5xx_until_allowed_or_spent() {
        let p = policy(RetryOn::FIVE_XX, 2);
        assert_eq!(attempts(Some(&p), &[503, 503, 200]).await, (200, 3));
        // Spent: the last 503 is the answer.
        assert_eq!(attempts(Some(&p), &[503]).await, (503, 3));
        assert_eq!(attempts(Some(&p), &[404]).await, (404, 1));
        assert_eq!(attempts(None, &[503, 200]).await, (503, 1));
        // No conditions: no retries.
        let none = policy(RetryOn::NONE, 2);
        assert_eq!(attempts(Some(&none), &[503, 200]).await, (503, 1));
        let gw = policy(RetryOn::GATEWAY_ERROR, 2);
        assert_eq!(attempts(Some(&gw), &[500, 200]).await, (500, 1));
        assert_eq!(attempts(Some(&gw), &[502, 200]).await, (200, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn back_off_stays_below_the_jittered_ceiling() {
        // Two retries wait below 200 ms, then below 600 ms.
        let p = policy(RetryOn::FIVE_XX, 2);
        let start = tokio::time::Instant::now();
        assert_eq!(attempts(Some(&p), &[503]).await, (503, 3));
        assert!(
            start.elapsed() < Duration::from_millis(800),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_attempt_hits_the_per_try_timeout_and_is_retried() {
        let p = policy(RetryOn::RESET, 1);
        let n = Cell::new(0usize);
        let start = tokio::time::Instant::now();
        let r = run(Some(&p), || {
            let first = n.get() == 0;
            n.set(n.get() + 1);
            async move {
                if first {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                }
                Ok::<_, ClientError>(answer(200))
            }
        })
        .await;
        assert_eq!(r.map(|a| a.status().as_u16()).ok(), Some(200));
        assert_eq!(n.get(), 2);
        // The per-try timeout is max_interval (3 s), plus a back-off below 200 ms.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(3) && took < Duration::from_millis(3200),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn connect_failures_retry_under_connect_failure_overflow_never() {
        let p = policy(RetryOn::CONNECT_FAILURE, 1);
        let n = Cell::new(0usize);
        let r = run(Some(&p), || {
            let first = n.get() == 0;
            n.set(n.get() + 1);
            async move {
                if first {
                    Err(ClientError::Send(SendError::ConnectFailure(
                        "refused".into(),
                    )))
                } else {
                    Ok(answer(200))
                }
            }
        })
        .await;
        assert!(r.is_ok() && n.get() == 2);
        let n = Cell::new(0usize);
        let r = run(Some(&policy(RetryOn::FIVE_XX, 3)), || {
            n.set(n.get() + 1);
            async { Err::<http::Response<Bytes>, _>(ClientError::Send(SendError::Overflow)) }
        })
        .await;
        assert!(r.is_err() && n.get() == 1);
    }
}
