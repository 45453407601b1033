use super::*;
use crate::chain::Verdict;
use crate::test_support::{filter_config, head, plain_conn, reply, run_sync, state};
use courier_config::filters::HttpFilterConfig;

fn filter(pass_through: bool) -> HealthCheckFilter {
    let f = filter_config(&format!(
        "name: envoy.filters.http.health_check\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck\n  pass_through_mode: {pass_through}\n  headers: [{{name: \":path\", string_match: {{exact: /ready}}}}, {{name: x-probe, present_match: true}}]\n"
    ));
    let HttpFilterConfig::HealthCheck(c) = f.config else {
        panic!("{f:?}")
    };
    HealthCheckFilter::new(*c)
}

// One test: the failing state is process-wide.
#[test]
fn answers_health_checks_and_marks_responses() {
    set_local_cluster("edge");
    let conn = plain_conn();
    let answering = filter(false);
    let passing = filter(true);

    // Both headers match: answered 200, the response names the local cluster.
    let mut req = state(&conn, head("GET", "/ready", &[("x-probe", "1")]));
    let r = reply(run_sync(&answering, &mut req, None));
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.details, "health_check_ok");
    assert!(r.body.is_empty() && r.response_flag.is_none());
    let mut h = HeaderMap::new();
    answering.encode_headers(&req, &mut h);
    assert_eq!(h[HEALTHCHECKED_CLUSTER], "edge");

    // One header missing, or a query string on the path: not a health check.
    for (uri, headers) in [("/ready", &[][..]), ("/ready?x=1", &[("x-probe", "1")][..])] {
        let mut req = state(&conn, head("GET", uri, headers));
        assert!(matches!(
            run_sync(&answering, &mut req, None),
            Verdict::Continue
        ));
        let mut h = HeaderMap::new();
        answering.encode_headers(&req, &mut h);
        assert!(h.is_empty());
    }

    // Pass-through: goes on, still marked.
    let mut req = state(&conn, head("GET", "/ready", &[("x-probe", "1")]));
    assert!(matches!(
        run_sync(&passing, &mut req, None),
        Verdict::Continue
    ));
    assert!(req.filter_state.get::<HealthCheckRequest>().is_some());

    // Failing: 503 LH in both modes; other responses say so.
    set_failing(true);
    for f in [&answering, &passing] {
        let mut req = state(&conn, head("GET", "/ready", &[("x-probe", "1")]));
        let r = reply(run_sync(f, &mut req, None));
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.details, "health_check_failed");
        assert_eq!(r.response_flag, Some("LH"));
        let mut h = HeaderMap::new();
        f.encode_headers(&req, &mut h);
        assert_eq!(h[IMMEDIATE_FAIL], "true");
        assert_eq!(h[HEALTHCHECKED_CLUSTER], "edge");
    }
    let mut req = state(&conn, head("GET", "/other", &[]));
    assert!(matches!(
        run_sync(&answering, &mut req, None),
        Verdict::Continue
    ));
    let mut h = HeaderMap::new();
    answering.encode_headers(&req, &mut h);
    assert_eq!(h[IMMEDIATE_FAIL], "true");
    set_failing(false);
}
