use super::*;
use crate::ctx::Ctx;

/// The `stats_config` of Istio's bootstraps (its `stats_tags` and inclusion list).
const ISTIO: &str = r#"{
  "use_all_default_tags": false,
  "stats_tags": [
    {"tag_name": "cluster_name", "regex": "^cluster(\\.(.+);)"},
    {"tag_name": "http_conn_manager_prefix", "regex": "^http\\.(((?:[_.[:digit:]\\w]*|[_\\[\\]aAbBcCdDeEfF[:digit:]\\w\\:]*));\\.)"},
    {"tag_name": "thread_name", "regex": "^server(\\.(.+))\\.watchdog"},
    {"tag_name": "tcp_prefix", "regex": "^tcp\\.((.*?)\\.)\\w+?$"},
    {"regex": "_rq(_(\\d{3}))$", "tag_name": "response_code"},
    {"tag_name": "response_code_class", "regex": "_rq(_(\\dxx))$"},
    {"tag_name": "http_conn_manager_listener_prefix", "regex": "^listener(?=\\.).*?\\.http\\.(((?:[_.[:digit:]]*|[_\\[\\]aAbBcCdDeEfF[:digit:]]*))\\.)"},
    {"tag_name": "listener_address", "regex": "^listener\\.(((?:[_.[:digit:]]*|[_\\[\\]aAbBcCdDeEfF[:digit:]]*))\\.)"},
    {"tag_name": "mongo_prefix", "regex": "^mongo\\.(.+?)\\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$"},
    {"regex": "(cache\\.(.+?)\\.)", "tag_name": "cache"},
    {"regex": "(component\\.(.+?)\\.)", "tag_name": "component"},
    {"regex": "(tag\\.(.+?);\\.)", "tag_name": "tag"},
    {"regex": "(wasm_filter\\.(.+?)\\.)", "tag_name": "wasm_filter"},
    {"tag_name": "authz_enforce_result", "regex": "rbac(\\.(allowed|denied))"},
    {"tag_name": "authz_dry_run_action", "regex": "(\\.istio_dry_run_(allow|deny)_)"},
    {"tag_name": "authz_dry_run_result", "regex": "(\\.shadow_(allowed|denied))"}
  ],
  "stats_matcher": {"inclusion_list": {"patterns": [
    {"prefix": "reporter="}, {"prefix": "cluster_manager"}, {"prefix": "listener_manager"},
    {"prefix": "server"}, {"prefix": "cluster.xds-grpc"}, {"prefix": "wasm"},
    {"suffix": "rbac.allowed"}, {"suffix": "rbac.denied"}, {"suffix": "shadow_allowed"},
    {"suffix": "shadow_denied"}, {"safe_regex": {"regex": "vhost\\..*\\.route\\..*"}},
    {"prefix": "component"}, {"prefix": "istio"}
  ]}}
}"#;

fn load(json: &str) -> Result<StatsConfig, crate::ConfigError> {
    let v: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| crate::ConfigError::single("json", e.to_string()))?;
    let doc = serde_json::json!({ "stats_config": v }).to_string();
    let bs = crate::bootstrap_from_str(&doc, crate::load::Format::Json)?;
    Ok(Arc::try_unwrap(bs.stats).unwrap_or_else(|_| StatsConfig::default()))
}

fn tags(t: &[(&str, &str)]) -> Vec<Tag> {
    t.iter()
        .map(|(n, v)| Tag {
            name: n.to_string(),
            value: v.to_string(),
        })
        .collect()
}

fn check(p: &TagProducer, name: &str, want_name: &str, want: &[(&str, &str)]) {
    let (got_name, got) = p.produce(name);
    assert_eq!(got_name, want_name, "name of {name}");
    assert_eq!(got, tags(want), "tags of {name}");
}

use std::sync::Arc;

#[test]
fn default_extractors_compile() {
    assert_eq!(defaults::extractors(None).len(), defaults::count());
}

#[test]
fn default_tags_as_envoy() {
    let p = StatsConfig::default().tags;
    check(
        &p,
        "cluster.echo.upstream_rq_200",
        "cluster.upstream_rq",
        &[
            ("envoy.response_code", "200"),
            ("envoy.cluster_name", "echo"),
        ],
    );
    check(
        &p,
        "cluster.echo.upstream_rq_2xx",
        "cluster.upstream_rq_xx",
        &[
            ("envoy.response_code_class", "2"),
            ("envoy.cluster_name", "echo"),
        ],
    );
    check(
        &p,
        "http.ingress.downstream_rq_5xx",
        "http.downstream_rq_xx",
        &[
            ("envoy.response_code_class", "5"),
            ("envoy.http_conn_manager_prefix", "ingress"),
        ],
    );
    check(
        &p,
        "listener.127.0.0.1_80.worker_1.downstream_cx_active",
        "listener.worker_downstream_cx_active",
        &[
            ("envoy.worker_id", "1"),
            ("envoy.listener_address", "127.0.0.1_80"),
        ],
    );
    check(
        &p,
        "listener.[__1]_8080.downstream_cx_total",
        "listener.downstream_cx_total",
        &[("envoy.listener_address", "[__1]_8080")],
    );
    // "admin" is Envoy's negative match for the listener address.
    check(
        &p,
        "listener.admin.downstream_cx_total",
        "listener.admin.downstream_cx_total",
        &[],
    );
    check(
        &p,
        "http.ingress.rbac.allowed",
        "http.rbac.allowed",
        &[("envoy.http_conn_manager_prefix", "ingress")],
    );
    check(
        &p,
        "http.ingress.ext_authz.authz.ok",
        "http.ext_authz.ok",
        &[
            ("envoy.ext_authz_prefix", "authz"),
            ("envoy.http_conn_manager_prefix", "ingress"),
        ],
    );
    check(
        &p,
        "tcp.db.downstream_cx_total",
        "tcp.downstream_cx_total",
        &[("envoy.tcp_prefix", "db")],
    );
    check(
        &p,
        "vhost.local.route.r1.upstream_rq_total",
        "vhost.route.upstream_rq_total",
        &[("envoy.virtual_host", "local"), ("envoy.route", "r1")],
    );
    check(
        &p,
        "listener_manager.worker_0.dispatcher.loop_duration_us",
        "listener_manager.worker_dispatcher.loop_duration_us",
        &[("envoy.worker_id", "0")],
    );
    check(&p, "server.live", "server.live", &[]);
    check(
        &p,
        "cluster.echo.health_check.name.ready.success",
        "cluster.health_check.success",
        &[
            ("envoy.health_check_name", "ready"),
            ("envoy.cluster_name", "echo"),
        ],
    );
}

#[test]
fn istio_tags_as_envoy() {
    let sc = load(ISTIO).unwrap_or_else(|e| panic!("{e}"));
    let p = &sc.tags;
    check(
        p,
        "cluster.outbound|80||echo.default.svc.cluster.local;.upstream_cx_total",
        "cluster.upstream_cx_total",
        &[(
            "cluster_name",
            "outbound|80||echo.default.svc.cluster.local",
        )],
    );
    // No `;`: Istio's cluster pattern leaves the name alone.
    check(
        p,
        "cluster.xds-grpc.upstream_rq_200",
        "cluster.xds-grpc.upstream_rq",
        &[("response_code", "200")],
    );
    check(
        p,
        "cluster.xds-grpc.upstream_rq_2xx",
        "cluster.xds-grpc.upstream_rq",
        &[("response_code_class", "2xx")],
    );
    check(
        p,
        "http.inbound_0.0.0.0_8080;.rbac.allowed",
        "http.rbac",
        &[
            ("authz_enforce_result", "allowed"),
            ("http_conn_manager_prefix", "inbound_0.0.0.0_8080"),
        ],
    );
    check(
        p,
        "http.inbound_0.0.0.0_8080;.rbac.istio_dry_run_allow_shadow_denied",
        "http.rbacshadow_denied",
        &[
            ("authz_dry_run_action", "allow"),
            ("http_conn_manager_prefix", "inbound_0.0.0.0_8080"),
        ],
    );
    check(
        p,
        "listener.0.0.0.0_15006.downstream_cx_total",
        "listener.downstream_cx_total",
        &[("listener_address", "0.0.0.0_15006")],
    );
    // The lookahead pattern.
    check(
        p,
        "listener.0.0.0.0_15006.http.10.0.0.1_8080.downstream_rq_total",
        "listener.http.downstream_rq_total",
        &[
            ("http_conn_manager_listener_prefix", "10.0.0.1_8080"),
            ("listener_address", "0.0.0.0_15006"),
        ],
    );
    check(
        p,
        "server.main_thread.watchdog_miss",
        "server.watchdog_miss",
        &[("thread_name", "main_thread")],
    );
    check(
        p,
        "tcp.inbound_9000.downstream_cx_total",
        "tcp.downstream_cx_total",
        &[("tcp_prefix", "inbound_9000")],
    );
}

#[test]
fn istio_matcher_as_envoy() {
    let sc = load(ISTIO).unwrap_or_else(|e| panic!("{e}"));
    let m = &sc.matcher;
    for kept in [
        "cluster_manager.cds.update_success",
        "server.live",
        "cluster.xds-grpc.upstream_cx_total",
        "http.inbound_0.0.0.0_80;.rbac.allowed",
        "vhost.local.route.r1.upstream_rq_total",
        "listener_manager.total_listeners_active",
    ] {
        assert!(!m.rejects(kept), "{kept} rejected");
    }
    for gone in [
        "cluster.echo.upstream_rq_total",
        "http.ingress.downstream_rq_total",
        "listener.0.0.0.0_80.downstream_cx_total",
        "runtime.load_success",
    ] {
        assert!(m.rejects(gone), "{gone} kept");
    }
}

#[test]
fn fixed_values_and_named_defaults() {
    let sc = load(
        r#"{"use_all_default_tags": false, "stats_tags": [
            {"tag_name": "mesh", "fixed_value": "blue"},
            {"tag_name": "envoy.cluster_name"}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    check(
        &sc.tags,
        "cluster.echo.upstream_rq_200",
        "cluster.upstream_rq_200",
        &[("mesh", "blue"), ("envoy.cluster_name", "echo")],
    );
    check(&sc.tags, "server.live", "server.live", &[("mesh", "blue")]);
    // Envoy reads a fixed value's leading `^word\.` as a first-token filter.
    let sc = load(r#"{"stats_tags": [{"tag_name": "c", "fixed_value": "^cluster\\.x"}]}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    check(&sc.tags, "server.live", "server.live", &[]);
    check(
        &sc.tags,
        "cluster.a.upstream_cx_total",
        "cluster.upstream_cx_total",
        &[("envoy.cluster_name", "a"), ("c", "^cluster\\.x")],
    );
}

#[test]
fn first_extractor_of_a_name_wins() {
    let sc = load(
        r#"{"stats_tags": [{"tag_name": "envoy.cluster_name", "regex": "^cluster\\.((.+?)\\.)"}]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // The default `cluster.$.**` comes first; the configured one is skipped.
    check(
        &sc.tags,
        "cluster.a.b.upstream_cx_total",
        "cluster.b.upstream_cx_total",
        &[("envoy.cluster_name", "a")],
    );
}

#[test]
fn matcher_kinds() {
    let sc = load(r#"{"stats_matcher": {"reject_all": true}}"#).unwrap_or_else(|e| panic!("{e}"));
    assert!(sc.matcher.rejects("server.live"));
    let sc = load(r#"{"stats_matcher": {"reject_all": false}}"#).unwrap_or_else(|e| panic!("{e}"));
    assert!(!sc.matcher.rejects("server.live"));
    let sc = load(
        r#"{"stats_matcher": {"exclusion_list": {"patterns": [{"contains": "upstream_rq"}]}}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(sc.matcher.rejects("cluster.a.upstream_rq_total"));
    assert!(!sc.matcher.rejects("cluster.a.upstream_cx_total"));
}

#[test]
fn envoys_errors_with_paths() {
    let cases = [
        (
            r#"{"stats_tags": [{"tag_name": "", "regex": "^x(\\.(.+))"}]}"#,
            "stats_config.stats_tags[0].tag_name: tag_name cannot be empty",
        ),
        (
            r#"{"stats_tags": [{"tag_name": "a", "regex": "(("}]}"#,
            "stats_config.stats_tags[0].regex: Invalid regex '(('",
        ),
        (
            r#"{"stats_tags": [{"tag_name": "a", "regex": "(?<=x)(\\.(.+))"}]}"#,
            "stats_config.stats_tags[0].regex: Invalid regex",
        ),
        (
            r#"{"stats_tags": [{"tag_name": "foo"}]}"#,
            "stats_config.stats_tags[0]: No regex specified for tag specifier and no default regex for name: 'foo'",
        ),
        (
            r#"{"stats_matcher": {}}"#,
            "stats_config.stats_matcher: one of reject_all",
        ),
        (
            r#"{"stats_matcher": {"inclusion_list": {"patterns": []}}}"#,
            "stats_config.stats_matcher.inclusion_list.patterns: value must contain at least 1 item(s)",
        ),
        (
            r#"{"histogram_bucket_settings": [{"match": {"prefix": "a"}, "buckets": [1, 0]}]}"#,
            "stats_config.histogram_bucket_settings[0].buckets[1]: value must be greater than 0",
        ),
        (
            r#"{"histogram_bucket_settings": [{"match": {"prefix": "a"}, "buckets": [1, 1]}]}"#,
            "stats_config.histogram_bucket_settings[0].buckets[1]: repeated value must contain unique items",
        ),
        (
            r#"{"histogram_bucket_settings": [{"buckets": [1]}]}"#,
            "stats_config.histogram_bucket_settings[0].match: value is required",
        ),
        (
            r#"{"histogram_bucket_settings": [{"match": {"prefix": "a"}, "bins": 0}]}"#,
            "stats_config.histogram_bucket_settings[0].bins: value must be inside range (0, 46082]",
        ),
    ];
    for (json, want) in cases {
        let err = match load(json) {
            Ok(_) => panic!("{json} loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{json}: {err} lacks {want}");
    }
}

#[test]
fn ecmascript_syntax_only() {
    assert!(ecma::compile(r"^listener(?=\.).*?\.http\.([_.[:digit:]]*\.)").is_ok());
    assert!(ecma::compile(r"(?!x)(a)").is_ok());
    for bad in [r"(?<=x)(a)", r"(?P<n>a)", r"(?i)(a)", r"\A(a)", r"a++"] {
        assert!(ecma::compile(bad).is_err(), "{bad} accepted");
    }
    let _ = Ctx::new();
}

#[test]
fn histogram_buckets_first_match_sorted_else_default() {
    let sc = load(
        r#"{"histogram_bucket_settings": [
            {"match": {"suffix": "_size"}, "buckets": [1000, 10, 100]},
            {"match": {"prefix": "cluster."}, "buckets": [2.5], "bins": 10}
        ]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        sc.buckets.for_stat("cluster.a.upstream_rq_body_size"),
        [10.0, 100.0, 1000.0]
    );
    assert_eq!(sc.buckets.for_stat("cluster.a.upstream_rq_time"), [2.5]);
    assert_eq!(
        sc.buckets.for_stat("http.in.downstream_rq_time"),
        super::DEFAULT_BUCKETS
    );
    assert_eq!(super::DEFAULT_BUCKETS.len(), 19);
}
