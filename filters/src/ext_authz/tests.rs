use super::*;
use crate::chain::Verdict;
use crate::request::{PeerCert, SelectedRoute, TlsFacts};
use crate::test_support::{filter_config, head, per_route_config, plain_conn, reply, run, state};
use courier_config::filters::HttpFilterConfig;
use courier_config::route::PerFilterConfigs;
use envoy_types::pb::envoy::config::core::v3::{
    HeaderValue as PbHeader, HeaderValueOption, QueryParameter,
};
use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{DeniedHttpResponse, OkHttpResponse};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use std::sync::atomic::AtomicUsize;

/// Answers every check with `answer` (`None`: never answers), counting calls.
struct Fake {
    answer: Option<Result<CheckResponse, String>>,
    calls: AtomicUsize,
    seen: arc_swap::ArcSwapOption<CheckRequest>,
}

impl Fake {
    fn new(answer: Option<Result<CheckResponse, String>>) -> Arc<Self> {
        Arc::new(Self {
            answer,
            calls: AtomicUsize::new(0),
            seen: arc_swap::ArcSwapOption::empty(),
        })
    }
}

impl AuthzTransport for Fake {
    fn check<'a>(
        &'a self,
        _: &'a GrpcService,
        _: Option<Duration>,
        frame: Bytes,
    ) -> CheckFuture<'a> {
        use prost::Message;
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert_eq!(frame[0], 0);
        assert_eq!(
            u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize,
            frame.len() - 5
        );
        let req = CheckRequest::decode(&frame[5..]).unwrap();
        self.seen.store(Some(Arc::new(req)));
        let answer = self.answer.clone();
        Box::pin(async move {
            match answer {
                Some(a) => a,
                None => std::future::pending().await,
            }
        })
    }

    fn http<'a>(
        &'a self,
        _: &'a HttpUri,
        _: Option<&'a CallRetryPolicy>,
        _: http::Request<Bytes>,
    ) -> HttpCheckFuture<'a> {
        Box::pin(async { Err("no HTTP here".to_string()) })
    }
}

fn filter(extra: &str, fake: &Arc<Fake>) -> ExtAuthzFilter {
    let f = filter_config(&format!(
        "name: envoy.filters.http.ext_authz\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n  grpc_service: {{envoy_grpc: {{cluster_name: authz}}}}\n{extra}"
    ));
    let HttpFilterConfig::ExtAuthz(c) = f.config else {
        panic!("not ext_authz");
    };
    ExtAuthzFilter::new(
        &f.name,
        Arc::new(*c),
        Arc::clone(fake) as Arc<dyn AuthzTransport>,
    )
}

fn status(code: i32) -> Option<RpcStatus> {
    Some(RpcStatus {
        code,
        ..Default::default()
    })
}

#[allow(deprecated)]
fn hvo(k: &str, v: &str, append: bool) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(PbHeader {
            key: k.into(),
            value: v.into(),
            ..Default::default()
        }),
        append: Some(envoy_types::pb::google::protobuf::BoolValue { value: append }),
        ..Default::default()
    }
}

fn route() -> Option<SelectedRoute<'static>> {
    Some(SelectedRoute::default())
}

#[tokio::test]
async fn ok_applies_mutations_metadata_and_response_headers() {
    let mut md = envoy_types::pb::google::protobuf::Struct::default();
    md.fields.insert(
        "user".into(),
        envoy_types::pb::google::protobuf::Value {
            kind: Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(
                "a".into(),
            )),
        },
    );
    let fake = Fake::new(Some(Ok(CheckResponse {
        status: status(0),
        dynamic_metadata: Some(md),
        http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
            headers: vec![
                hvo("x-set", "s", false),
                hvo("x-app", "2", true),
                hvo("x-none", "n", true),
            ],
            headers_to_remove: vec!["x-gone".into(), ":path".into(), "host".into()],
            response_headers_to_add: vec![hvo("x-resp", "r", false)],
            query_parameters_to_set: vec![QueryParameter {
                key: "b".into(),
                value: "2".into(),
            }],
            query_parameters_to_remove: vec!["c".into()],
            ..Default::default()
        })),
    })));
    let f = filter("  clear_route_cache: true\n", &fake);
    let conn = plain_conn();
    let mut req = state(
        &conn,
        head(
            "GET",
            "/p?c=3&a=1",
            &[
                ("host", "h"),
                ("x-app", "1"),
                ("x-gone", "g"),
                ("x-set", "old"),
            ],
        ),
    );
    req.route = route();
    assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
    let h = &req.head.headers;
    assert_eq!(h["x-set"], "s");
    assert_eq!(h["x-app"], "1,2");
    assert!(h.get("x-none").is_none() && h.get("x-gone").is_none());
    assert_eq!(h["host"], "h");
    assert_eq!(req.path(), "/p?a=1&b=2");
    let mut resp = http::HeaderMap::new();
    resp.insert("x-resp", HeaderValue::from_static("up"));
    f.encode_headers(&req, &mut resp);
    assert_eq!(resp.get_all("x-resp").iter().collect::<Vec<_>>(), ["r"]);
    assert_eq!(req.metadata[FILTER_NAME]["user"], "a");
    // The call's duration in ms joins the answer's metadata (as Envoy's).
    assert!(req.metadata[FILTER_NAME]["ext_authz_duration"].is_u64());
    assert!(req.route_cache_cleared());
    assert_eq!(f.stats().sum(|s| &s.ok), 1);
}

#[tokio::test]
async fn denied_answers_with_the_servers_status_headers_and_body() {
    let fake = Fake::new(Some(Ok(CheckResponse {
        status: status(7),
        http_response: Some(HttpResponse::DeniedResponse(DeniedHttpResponse {
            status: Some(HttpStatus { code: 418 }),
            headers: vec![hvo("x-why", "tea", false)],
            body: "no".into(),
        })),
        ..Default::default()
    })));
    let f = filter("", &fake);
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    req.route = route();
    let r = reply(run(&f, &mut req, None).await);
    assert_eq!((r.status.as_u16(), &r.body[..]), (418, &b"no"[..]));
    assert_eq!(r.headers["x-why"], "tea");
    assert_eq!(r.details, "ext_authz_denied");

    let bare = Fake::new(Some(Ok(CheckResponse {
        status: status(7),
        ..Default::default()
    })));
    let f = filter("", &bare);
    let r = reply(run(&f, &mut req, None).await);
    assert_eq!((r.status.as_u16(), r.body.len()), (403, 0));
}

#[tokio::test(start_paused = true)]
async fn errors_and_timeouts_fail_closed_or_open() {
    let conn = plain_conn();
    for fake in [Fake::new(Some(Err("unavailable".into()))), Fake::new(None)] {
        let f = filter("  status_on_error: {code: 503}\n", &fake);
        let mut req = state(&conn, head("GET", "/", &[]));
        req.route = route();
        let r = reply(run(&f, &mut req, None).await);
        assert_eq!((r.status.as_u16(), r.body.len()), (503, 0));
        assert_eq!(r.details, "ext_authz_error");
        assert_eq!(f.stats().sum(|s| &s.error), 1);

        let f = filter(
            "  failure_mode_allow: true\n  failure_mode_allow_header_add: true\n",
            &fake,
        );
        let mut req = state(&conn, head("GET", "/", &[]));
        req.route = route();
        assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
        assert_eq!(
            req.head.headers["x-envoy-auth-failure-mode-allowed"],
            "true"
        );
        assert_eq!(f.stats().sum(|s| &s.failure_mode_allowed), 1);
    }
}

#[tokio::test]
async fn no_route_and_disabled_routes_are_not_checked() {
    let fake = Fake::new(Some(Ok(CheckResponse {
        status: status(7),
        ..Default::default()
    })));
    let f = filter("", &fake);
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
    req.route = route();
    let off = per_route_config(
        "envoy.filters.http.ext_authz",
        "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute\ndisabled: true\n",
    );
    assert!(matches!(
        run(&f, &mut req, off.config.as_ref()).await,
        Verdict::Continue
    ));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn check_request_carries_the_request_peer_and_merged_context() {
    let fake = Fake::new(Some(Ok(CheckResponse {
        status: status(0),
        ..Default::default()
    })));
    let f = filter("", &fake);
    let mut conn = plain_conn();
    conn.tls = Some(TlsFacts {
        sni: None,
        peer_cert: Some(PeerCert {
            uri_sans: vec!["spiffe://c/ns/a".into()],
            dns_sans: vec!["a.test".into()],
            subject: "CN=a".into(),
        }),
    });
    let ctx = |yaml: &str| {
        per_route_config(
            "envoy.filters.http.ext_authz",
            &format!(
                "\"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute\ncheck_settings: {{context_extensions: {yaml}}}\n"
            ),
        )
    };
    let vhost: PerFilterConfigs = [(
        "envoy.filters.http.ext_authz".to_string(),
        ctx("{a: vhost, b: vhost}"),
    )]
    .into();
    let route_level: PerFilterConfigs = [(
        "envoy.filters.http.ext_authz".to_string(),
        ctx("{b: route}"),
    )]
    .into();
    let mut req = state(
        &conn,
        head(
            "POST",
            "/x?y=1",
            &[("host", "h.test"), ("x-r", "1"), ("x-r", "2")],
        ),
    );
    req.route = Some(SelectedRoute {
        per_filter: [None, Some(&route_level), Some(&vhost), None],
        metadata: None,
        cluster: None,
        ..Default::default()
    });
    let own = route_level.values().next().and_then(|c| c.config.as_ref());
    assert!(matches!(run(&f, &mut req, own).await, Verdict::Continue));
    let seen = fake.seen.load_full().unwrap();
    let a = seen.attributes.as_ref().unwrap();
    let h = a.request.as_ref().unwrap().http.as_ref().unwrap();
    assert_eq!(
        (h.method.as_str(), h.path.as_str(), h.host.as_str()),
        ("POST", "/x?y=1", "h.test")
    );
    assert_eq!(
        (h.scheme.as_str(), h.protocol.as_str()),
        ("https", "HTTP/1.1")
    );
    assert_eq!(h.headers["x-r"], "1,2");
    assert_eq!(h.headers[":path"], "/x?y=1");
    assert!(!h.headers.contains_key("host"));
    assert_eq!(a.source.as_ref().unwrap().principal, "spiffe://c/ns/a");
    assert_eq!(a.context_extensions["a"], "vhost");
    assert_eq!(a.context_extensions["b"], "route");
}

#[tokio::test]
#[allow(deprecated)] // `append` is what Envoy reads first.
async fn response_headers_follow_append_then_append_action() {
    use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction as A;
    let action = |k: &str, a: A| HeaderValueOption {
        append: None,
        append_action: a as i32,
        ..hvo(k, "authz", false)
    };
    let fake = Fake::new(Some(Ok(CheckResponse {
        status: status(0),
        http_response: Some(HttpResponse::OkResponse(OkHttpResponse {
            response_headers_to_add: vec![
                hvo("x-set", "authz", false),
                hvo("x-add", "authz", true),
                action("x-default", A::AppendIfExistsOrAdd),
                action("x-if-absent", A::AddIfAbsent),
                action("x-if-absent-new", A::AddIfAbsent),
                action("x-overwrite", A::OverwriteIfExists),
                action("x-overwrite-new", A::OverwriteIfExists),
                action("x-set-or-add", A::OverwriteIfExistsOrAdd),
            ],
            ..Default::default()
        })),
        ..Default::default()
    })));
    let f = filter("", &fake);
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[("host", "h")]));
    req.route = route();
    assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
    let mut resp = http::HeaderMap::new();
    for n in ["x-set", "x-add", "x-default", "x-if-absent", "x-overwrite"] {
        resp.insert(n, HeaderValue::from_static("up"));
    }
    f.encode_headers(&req, &mut resp);
    let all = |n: &str| {
        resp.get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(all("x-set"), ["authz"]);
    assert_eq!(all("x-add"), ["up", "authz"]);
    assert_eq!(all("x-default"), ["up", "authz"]);
    assert_eq!(all("x-if-absent"), ["up"]);
    assert_eq!(all("x-if-absent-new"), ["authz"]);
    assert_eq!(all("x-overwrite"), ["authz"]);
    assert!(all("x-overwrite-new").is_empty());
    assert_eq!(all("x-set-or-add"), ["authz"]);
    // No metadata in the answer: no ext_authz_duration either.
    assert!(!req.metadata.contains_key(FILTER_NAME));
}

#[tokio::test]
async fn disabled_by_filter_enabled_or_metadata_counts_and_may_deny() {
    let allow = || {
        Fake::new(Some(Ok(CheckResponse {
            status: status(0),
            ..Default::default()
        })))
    };
    let conn = plain_conn();
    // 0 %: never checked, counted as disabled, passed on.
    let fake = allow();
    let f = filter("  filter_enabled: {default_value: {numerator: 0}}\n", &fake);
    let mut req = state(&conn, head("GET", "/", &[("host", "h")]));
    req.route = route();
    assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    assert_eq!(f.stats().sum(|s| &s.disabled), 1);
    // deny_at_disable: status_on_error with an empty body.
    let f = filter(
        "  filter_enabled: {default_value: {numerator: 0}}\n  deny_at_disable: {default_value: true}\n  status_on_error: {code: 503}\n",
        &fake,
    );
    let mut req = state(&conn, head("GET", "/", &[("host", "h")]));
    req.route = route();
    let r = reply(run(&f, &mut req, None).await);
    assert_eq!((r.status.as_u16(), r.body.len()), (503, 0));
    assert_eq!(f.stats().sum(|s| &s.disabled), 1);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    // filter_enabled_metadata: checked only when earlier metadata matches.
    let f = filter(
        "  filter_enabled_metadata: {filter: ns, path: [{key: k}], value: {string_match: {exact: go}}}\n  filter_enabled: {default_value: {numerator: 100}}\n",
        &fake,
    );
    let mut req = state(&conn, head("GET", "/", &[("host", "h")]));
    req.route = route();
    assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 0);
    let mut md = serde_json::Map::new();
    md.insert("k".into(), "go".into());
    let mut req = state(&conn, head("GET", "/", &[("host", "h")]));
    req.route = route();
    req.merge_metadata("ns", md);
    assert!(matches!(run(&f, &mut req, None).await, Verdict::Continue));
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1);
    assert_eq!(f.stats().sum(|s| &s.disabled), 1);
}
