use super::*;
use crate::request::SelectedRoute;
use crate::test_support::{filter_config, head, per_route_config, plain_conn, reply, run, state};
use courier_config::filters::HttpFilterConfig;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::DescriptorStatus;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Sender, channel};

/// Answers from the first descriptor's first value; records each request.
struct Fake(Sender<RateLimitRequest>);

impl RateLimitTransport for Fake {
    fn should_rate_limit<'a>(
        &'a self,
        _: &'a GrpcService,
        _: Option<Duration>,
        request: RateLimitRequest,
    ) -> RlsFuture<'a> {
        let value = request.descriptors[0].entries[0].value.clone();
        let _ = self.0.send(request);
        Box::pin(async move {
            match value.as_str() {
                "over" => Ok(RateLimitResponse {
                    overall_code: Code::OverLimit as i32,
                    statuses: vec![DescriptorStatus::default()],
                    raw_body: b"no".to_vec(),
                    ..Default::default()
                }),
                "fail" => Err("unavailable".into()),
                "slow" => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(RateLimitResponse::default())
                }
                _ => Ok(RateLimitResponse {
                    overall_code: Code::Ok as i32,
                    ..Default::default()
                }),
            }
        })
    }
}

const TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit";

fn filter(extra: &str, fake: Fake) -> RateLimitHttpFilter {
    let f = filter_config(&format!(
        "name: envoy.filters.http.ratelimit\ntyped_config:\n  \"@type\": {TYPE}\n  domain: d\n  rate_limit_service: {{grpc_service: {{envoy_grpc: {{cluster_name: rls}}}}, transport_api_version: V3}}\n  rate_limits: [{{actions: [{{request_headers: {{header_name: x-v, descriptor_key: v}}}}]}}]\n{extra}"
    ));
    let HttpFilterConfig::RateLimit(c) = f.config else {
        panic!()
    };
    RateLimitHttpFilter::new(Arc::new(*c), Arc::new(fake))
}

fn routed<'a>(conn: &'a crate::ConnFacts, v: Option<&str>) -> RequestState<'a> {
    let h: Vec<(&str, &str)> = v.map(|v| ("x-v", v)).into_iter().collect();
    let mut req = state(conn, head("GET", "/", &h));
    req.route = Some(SelectedRoute {
        cluster: Some("up"),
        ..Default::default()
    });
    req
}

fn counted(f: &RateLimitHttpFilter) -> Vec<(String, u64, u64, u64, u64)> {
    let mut out = Vec::new();
    f.cluster_stats().each(|n, s| {
        out.push((
            n.to_string(),
            s.ok.load(Ordering::Relaxed),
            s.denied.load(Ordering::Relaxed),
            s.error.load(Ordering::Relaxed),
            s.failure_mode_allowed.load(Ordering::Relaxed),
        ))
    });
    out
}

#[tokio::test(start_paused = true)]
async fn answers_decide_and_failures_are_allowed_by_default() {
    let (tx, rx) = channel();
    let f = filter("", Fake(tx));
    let conn = plain_conn();
    macro_rules! go {
        ($v:expr) => {
            run(&f, &mut routed(&conn, $v), None)
        };
    }
    assert!(matches!(go!(Some("a")).await, Verdict::Continue));
    let r = reply(go!(Some("over")).await);
    assert_eq!((r.status.as_u16(), &r.body[..]), (429, &b"no"[..]));
    assert_eq!(r.headers["x-envoy-ratelimited"], "true");
    assert_eq!(r.response_flag, Some("RL"));
    // A failed call and one past the 20 ms default deadline both let the request through.
    assert!(matches!(go!(Some("fail")).await, Verdict::Continue));
    assert!(matches!(go!(Some("slow")).await, Verdict::Continue));
    // No descriptor, or no route cluster: no call.
    assert!(matches!(go!(None).await, Verdict::Continue));
    let mut no_route = state(&conn, head("GET", "/", &[("x-v", "a")]));
    assert!(matches!(
        run(&f, &mut no_route, None).await,
        Verdict::Continue
    ));
    let sent: Vec<String> = rx
        .try_iter()
        .map(|r| format!("{} {}", r.domain, r.descriptors[0].entries[0].value))
        .collect();
    assert_eq!(sent, ["d a", "d over", "d fail", "d slow"]);
    assert_eq!(counted(&f), [("up".to_string(), 1, 1, 2, 2)]);
}

#[tokio::test]
async fn failure_mode_deny_and_per_route_descriptors_and_domain() {
    let (tx, rx) = channel();
    let f = filter(
        "  failure_mode_deny: true\n  rate_limited_status: {code: 503}\n  disable_x_envoy_ratelimited_header: true\n",
        Fake(tx),
    );
    let conn = plain_conn();
    let r = reply(run(&f, &mut routed(&conn, Some("fail")), None).await);
    assert_eq!((r.status.as_u16(), r.response_flag), (500, Some("RLSE")));
    let r = reply(run(&f, &mut routed(&conn, Some("over")), None).await);
    assert_eq!(r.status.as_u16(), 503);
    assert!(r.headers.get("x-envoy-ratelimited").is_none());
    let pr = per_route_config(
        "envoy.filters.http.ratelimit",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute\ndomain: other\nrate_limits: [{actions: [{generic_key: {descriptor_value: g}}]}]\n",
    );
    assert!(matches!(
        run(&f, &mut routed(&conn, None), pr.config.as_ref()).await,
        Verdict::Continue
    ));
    let last = rx.try_iter().last().unwrap();
    assert_eq!(last.domain, "other");
    let e = &last.descriptors[0].entries[0];
    assert_eq!((e.key.as_str(), e.value.as_str()), ("generic_key", "g"));
    assert_eq!(counted(&f), [("up".to_string(), 1, 1, 1, 0)]);
}
