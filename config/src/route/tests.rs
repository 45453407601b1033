//! Route configuration tests, from YAML through the support walker to the model.

use super::*;
use crate::load::{self, Format};
use crate::support;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// Loads a `RouteConfiguration` from YAML the way the loader does (support walk,
/// then translation) with `clusters` as the known clusters.
pub(super) fn load_rc(
    yaml: &str,
    inline: bool,
    clusters: &[&str],
) -> (Option<RouteConfig>, Vec<String>) {
    let value = load::parse_text(yaml, Format::Yaml).expect("yaml");
    let dynamic = load::dynamic_from_json(value, "envoy.config.route.v3.RouteConfiguration")
        .expect("well-formed RouteConfiguration");
    let mut ctx = Ctx::new();
    ctx.set_static_clusters(Arc::new(clusters.iter().map(|s| s.to_string()).collect()));
    support::check(&dynamic, &Path::ROOT, &mut ctx);
    let typed: pb::RouteConfiguration = load::typed_from_dynamic(&dynamic).expect("typed");
    let rc = if inline {
        translate_inline(&typed, &Path::ROOT, &mut ctx)
    } else {
        translate(&typed, &Path::ROOT, &mut ctx)
    };
    let errors = match ctx.finish(()) {
        Ok(()) => vec![],
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    };
    (rc, errors)
}

fn ok(yaml: &str) -> RouteConfig {
    let (rc, errors) = load_rc(yaml, true, &["backend", "other"]);
    assert!(errors.is_empty(), "{errors:#?}");
    rc.expect("route config")
}

fn errs(yaml: &str) -> Vec<String> {
    load_rc(yaml, true, &["backend", "other"]).1
}

/// A request for matching tests.
struct Req {
    path: &'static str,
    headers: Vec<(&'static str, &'static str)>,
}

fn req(path: &'static str) -> Req {
    Req {
        path,
        headers: vec![],
    }
}

impl RouteRequest for Req {
    fn path(&self) -> &str {
        self.path
    }
    fn method(&self) -> &str {
        "GET"
    }
    fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .collect();
        match values.len() {
            0 => None,
            1 => Some(Cow::Borrowed(values[0])),
            _ => Some(Cow::Owned(values.join(","))),
        }
    }
    fn any_header_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> Option<bool> {
        let mut values = self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
            .peekable();
        values.peek()?;
        Some(values.any(test))
    }
}

fn route_name<'a>(vh: &'a VirtualHost, r: &Req) -> Option<&'a str> {
    let indexed = vh.select_route(r).map(|r| r.name.as_str());
    let linear = vh.select_route_linear(r).map(|r| r.name.as_str());
    assert_eq!(
        indexed, linear,
        "index and linear scan disagree on {}",
        r.path
    );
    indexed
}

#[test]
fn defaults_inline_and_rds() {
    let yaml = r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /}
    route: {cluster: backend}
"#;
    let rc = ok(yaml);
    assert!(rc.validate_clusters);
    assert_eq!(rc.max_direct_response_body_size_bytes, 4096);
    assert!(!rc.ignore_port_in_host_matching);
    let route = &rc.virtual_hosts[0].routes[0];
    let ra = route.route_action().unwrap();
    assert_eq!(ra.timeout, Some(Duration::from_secs(15)));
    assert_eq!(ra.idle_timeout, None);
    assert_eq!(ra.cluster_not_found_response_code, 503);
    assert_eq!(ra.priority, RoutingPriority::Default);
    assert!(route.route_match.case_sensitive);
    let (rds, errors) = load_rc(yaml, false, &["backend"]);
    assert!(errors.is_empty());
    assert!(!rds.unwrap().validate_clusters);
}

#[test]
fn unknown_clusters_are_reported_where_named() {
    let yaml = r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /a}
    route: {cluster: nope}
  - match: {prefix: /b}
    route:
      weighted_clusters:
        clusters: [{name: backend, weight: 1}, {name: gone, weight: 2}]
"#;
    assert_eq!(
        errs(yaml),
        vec![
            "virtual_hosts[0].routes[0].route.cluster: unknown cluster 'nope'",
            "virtual_hosts[0].routes[1].route.weighted_clusters.clusters[1].name: unknown cluster 'gone'",
        ]
    );
    // RDS does not validate unless asked to.
    assert!(load_rc(yaml, false, &["backend"]).1.is_empty());
    let asked = format!("validate_clusters: true\n{yaml}");
    assert_eq!(load_rc(&asked, false, &["backend"]).1.len(), 2);
    let off = format!("validate_clusters: false\n{yaml}");
    assert!(load_rc(&off, true, &["backend"]).1.is_empty());
}

#[test]
fn duplicate_domains_as_envoy() {
    let yaml = r#"
name: r
virtual_hosts:
- {name: a, domains: ["*", "foo.com"], routes: []}
- {name: b, domains: ["FOO.com", "*"], routes: []}
"#;
    assert_eq!(
        errs(yaml),
        vec![
            "virtual_hosts[1].domains[0]: Only unique values for domains are permitted. Duplicate entry of domain foo.com in route r",
            "virtual_hosts[1].domains[1]: Only a single wildcard domain is permitted in route r",
        ]
    );
}

#[test]
fn required_fields() {
    let yaml = r#"
name: r
virtual_hosts:
- domains: []
  routes:
  - route: {cluster: backend}
  - match: {prefix: /}
  - match: {headers: [{name: x}]}
    route: {cluster: backend}
"#;
    assert_eq!(
        errs(yaml),
        vec![
            "virtual_hosts[0].name: must not be empty",
            "virtual_hosts[0].domains: at least one domain is required",
            "virtual_hosts[0].routes[0].match: is required",
            "virtual_hosts[0].routes[1]: one of route, redirect or direct_response is required",
            "virtual_hosts[0].routes[2].match: one of prefix, path, safe_regex or path_separated_prefix is required",
        ]
    );
}

#[test]
fn zipkin_decorators_refused_and_format_headers_accepted() {
    let yaml = r#"
name: local_route
virtual_hosts:
- name: proxy
  domains: ["*"]
  routes:
  - match: {prefix: "/trace/1"}
    route: {cluster: backend}
    decorator: {operation: routeToEnvoy1}
  - match: {prefix: "/trace/2"}
    route: {cluster: other}
    decorator: {operation: routeToEnvoy2ViaEnvoy1}
  response_headers_to_add:
  - header: {key: "x-b3-traceid", value: "%REQ(x-b3-traceid)%"}
  - header: {key: "x-request-id", value: "%REQ(x-request-id)%"}
"#;
    assert_eq!(
        errs(yaml),
        vec![
            "virtual_hosts[0].routes[0].decorator: decorator is not supported",
            "virtual_hosts[0].routes[1].decorator: decorator is not supported",
        ]
    );
    let without = yaml
        .replace("    decorator: {operation: routeToEnvoy1}\n", "")
        .replace("    decorator: {operation: routeToEnvoy2ViaEnvoy1}\n", "");
    let rc = ok(&without);
    let add = &rc.virtual_hosts[0].response_headers.add;
    assert_eq!(add.len(), 2);
    assert_eq!(add[0].name, "x-b3-traceid");
    assert!(!add[0].value.is_literal());
}

#[test]
fn unimplemented_features_are_refused_by_path() {
    let yaml = r#"
name: r
vhds: {config_source: {ads: {}}}
virtual_hosts:
- name: a
  domains: ["*"]
  require_tls: ALL
  routes:
  - match: {prefix: /, runtime_fraction: {default_value: {numerator: 50}}}
    route:
      cluster: backend
      hash_policy: [{header: {header_name: x}}, {filter_state: {key: k}}]
      request_mirror_policies: [{cluster: backend, cluster_header: x, runtime_fraction: {default_value: {numerator: 1}, runtime_key: k}}]
  - match: {connect_matcher: {}}
    route: {cluster: backend}
  - match: {prefix: /}
    non_forwarding_action: {}
"#;
    // The walker reports in field-number order; compare as sets.
    let mut got = errs(yaml);
    got.sort();
    assert_eq!(
        got,
        vec![
            "vhds: vhds is not supported",
            "virtual_hosts[0].require_tls: require_tls is not supported",
            "virtual_hosts[0].routes[0].match.runtime_fraction: runtime_fraction is not supported",
            "virtual_hosts[0].routes[0].route.hash_policy[1].filter_state: filter_state is not supported",
            "virtual_hosts[0].routes[0].route.request_mirror_policies[0].cluster_header: cluster_header is not supported",
            "virtual_hosts[0].routes[0].route.request_mirror_policies[0].runtime_fraction.runtime_key: runtime_key is not supported",
            "virtual_hosts[0].routes[1].match.connect_matcher: connect_matcher is not supported",
            "virtual_hosts[0].routes[2].non_forwarding_action: non_forwarding_action is not supported",
        ]
    );
}

#[test]
fn request_mirror_policies() {
    let yaml = r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /}
    route:
      cluster: backend
      request_mirror_policies:
      - cluster: backend
      - cluster: backend
        disable_shadow_host_suffix_append: true
        runtime_fraction: {default_value: {numerator: 250000, denominator: MILLION}}
"#;
    let rc = ok(yaml);
    let Action::Route(a) = &rc.virtual_hosts[0].routes[0].action else {
        panic!()
    };
    let m = &a.request_mirror_policies;
    assert_eq!((m[0].fraction, m[0].shadow_suffix), (None, true));
    assert_eq!((m[1].fraction, m[1].shadow_suffix), (Some(0.25), false));
    assert_eq!(mirror::shadow_host("a.com"), "a.com-shadow");
    assert_eq!(mirror::shadow_host("a.com:8080"), "a.com-shadow:8080");
    let bad = "name: r\nvirtual_hosts:\n- name: a\n  domains: [\"*\"]\n  routes:\n  - match: {prefix: /}\n    route: {cluster: backend, request_mirror_policies: [{runtime_fraction: {}}]}\n";
    let got = errs(bad);
    assert!(
        got.contains(&"virtual_hosts[0].routes[0].route.request_mirror_policies[0].cluster: must not be empty".to_string()),
        "{got:?}"
    );
}

#[test]
fn action_rules() {
    let yaml = r#"
name: r
max_direct_response_body_size_bytes: 3
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /}
    route:
      cluster: backend
      prefix_rewrite: /x
      regex_rewrite: {pattern: {regex: a}, substitution: b}
  - match: {prefix: /}
    direct_response: {status: 600}
  - match: {prefix: /}
    direct_response: {status: 200, body: {inline_string: abcd}}
  - match: {prefix: /}
    route:
      weighted_clusters:
        clusters: [{name: backend, weight: 0}]
  - match: {prefix: /}
    route:
      weighted_clusters:
        clusters: [{name: backend}]
  - match: {safe_regex: {regex: "/a(("}}
    route: {cluster: backend, timeout: -1s}
"#;
    assert_eq!(
        errs(yaml),
        vec![
            "virtual_hosts[0].routes[0].route.regex_rewrite: prefix_rewrite and regex_rewrite cannot both be set",
            "virtual_hosts[0].routes[1].direct_response.status: 600 is not a status between 200 and 599",
            "virtual_hosts[0].routes[2].direct_response.body: response body size is 4 bytes; maximum is 3 (max_direct_response_body_size_bytes)",
            "virtual_hosts[0].routes[3].route.weighted_clusters: the sum of weights must be greater than 0",
            "virtual_hosts[0].routes[4].route.weighted_clusters.clusters[0].weight: is required",
            "virtual_hosts[0].routes[5].match.safe_regex.regex: invalid regex: unclosed group",
            "virtual_hosts[0].routes[5].route.timeout: must not be negative",
        ]
    );
}

#[test]
fn full_model() {
    let rc = ok(r#"
name: r
ignore_port_in_host_matching: true
request_headers_to_add: [{header: {key: X-Rc, value: "1"}, append_action: OVERWRITE_IF_EXISTS_OR_ADD}]
internal_only_headers: [X-Internal]
virtual_hosts:
- name: a
  domains: ["api.example.com"]
  retry_policy:
    retry_on: "5xx,connect-failure,unavailable"
    num_retries: 3
    per_try_timeout: 0.5s
    retry_back_off: {base_interval: 0.1s}
    retry_host_predicate:
    - name: envoy.retry_host_predicates.previous_hosts
      typed_config: {"@type": type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate}
    host_selection_retry_max_attempts: 3
    retriable_status_codes: [409]
  hedge_policy: {hedge_on_per_try_timeout: true}
  include_attempt_count_in_response: true
  per_request_buffer_limit_bytes: 1024
  routes:
  - name: w
    match: {path: /weighted}
    route:
      weighted_clusters:
        total_weight: 100
        clusters:
        - {name: backend, weight: 75, host_rewrite_literal: b.example, request_headers_to_add: [{header: {key: x-w, value: b}}]}
        - {name: other, weight: 25}
      timeout: 0s
      idle_timeout: 0s
      priority: HIGH
      cluster_not_found_response_code: NOT_FOUND
  - name: redirect
    match: {prefix: /old}
    redirect: {https_redirect: true, prefix_rewrite: /new, response_code: PERMANENT_REDIRECT, strip_query: true}
  - name: hdr
    match: {prefix: /h}
    route: {cluster_header: X-Cluster, auto_host_rewrite: true, regex_rewrite: {pattern: {regex: "^/h/(.*)$"}, substitution: '/\1'}}
    metadata: {filter_metadata: {ns: {k: v}}}
"#);
    let vh = rc.select_virtual_host("API.example.com:8443").unwrap();
    assert_eq!(vh.name, "a");
    assert!(rc.select_virtual_host("other.example.com").is_none());
    assert_eq!(rc.internal_only_headers, vec!["x-internal"]);
    assert_eq!(
        rc.request_headers.add[0].action,
        AppendAction::OverwriteIfExistsOrAdd
    );
    let rp = vh.retry_policy.as_ref().unwrap();
    assert!(
        rp.retry_on
            .contains(RetryOn::FIVE_XX | RetryOn::CONNECT_FAILURE | RetryOn::GRPC_UNAVAILABLE)
    );
    assert_eq!(rp.num_retries, 3);
    assert_eq!(rp.per_try_timeout, Some(Duration::from_millis(500)));
    assert_eq!(rp.back_off.max_interval, Duration::from_secs(1));
    assert_eq!(
        rp.retry_host_predicates,
        vec![RetryHostPredicate::PreviousHosts]
    );
    assert_eq!(rp.retriable_status_codes, vec![409]);
    assert_eq!(
        vh.hedge_policy,
        Some(HedgePolicy {
            hedge_on_per_try_timeout: true
        })
    );
    assert_eq!(vh.request_body_buffer_limit, Some(1024));

    let w = vh.routes[0].route_action().unwrap();
    assert_eq!(w.timeout, None);
    assert_eq!(w.idle_timeout, Some(Duration::ZERO));
    assert_eq!(w.priority, RoutingPriority::High);
    assert_eq!(w.cluster_not_found_response_code, 404);
    let ClusterSpecifier::Weighted(wc) = &w.cluster else {
        panic!("weighted")
    };
    assert_eq!(wc.total_weight, 100);
    assert_eq!(
        wc.clusters[0].host_rewrite_literal.as_deref(),
        Some("b.example")
    );
    assert_eq!(wc.pick(74).unwrap().name, "backend");
    assert_eq!(wc.pick(75).unwrap().name, "other");

    let Action::Redirect(rd) = &vh.routes[1].action else {
        panic!("redirect")
    };
    assert_eq!(rd.scheme.as_deref(), Some("https"));
    assert_eq!(rd.response_code, 308);
    assert!(matches!(&rd.path, Some(RedirectPath::Prefix(p)) if p == "/new"));

    let h = vh.routes[2].route_action().unwrap();
    assert!(matches!(&h.cluster, ClusterSpecifier::Header(n) if n == "x-cluster"));
    assert_eq!(h.host_rewrite, Some(HostRewrite::Auto));
    let Some(PathRewrite::Regex(re)) = &h.path_rewrite else {
        panic!("regex rewrite")
    };
    assert_eq!(re.apply("/h/a/b"), "/a/b");
    assert_eq!(vh.routes[2].metadata["ns"]["k"], "v");
}

#[test]
fn conformance_cases_3_and_4() {
    let rc = ok(r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - name: inverted
    match: {prefix: /inv, headers: [{name: x-a, string_match: {exact: "1"}, invert_match: true}]}
    route: {cluster: backend}
  - name: absent
    match: {prefix: /inv, headers: [{name: x-a, present_match: false}]}
    route: {cluster: backend}
  - name: psp
    match: {path_separated_prefix: /api}
    route: {cluster: backend}
  - name: prefix
    match: {prefix: /api}
    route: {cluster: backend}
  - name: exact-ci
    match: {path: /Exact, case_sensitive: false}
    route: {cluster: backend}
  - name: query
    match: {prefix: /q, query_parameters: [{name: debug, string_match: {exact: "1"}}, {name: skip, present_match: false}]}
    route: {cluster: backend}
  - name: grpc
    match: {prefix: /, grpc: {}}
    route: {cluster: backend}
  - name: regex
    match: {safe_regex: {regex: "/r/[0-9]+"}}
    route: {cluster: backend}
"#);
    let vh = &rc.virtual_hosts[0];
    // Case 3.
    for (path, want) in [
        ("/api", Some("psp")),
        ("/api/v1", Some("psp")),
        ("/api?x", Some("psp")),
        ("/apix", Some("prefix")),
        ("/api?x=1", Some("psp")),
        ("/exact", Some("exact-ci")),
        ("/EXACT?q", Some("exact-ci")),
        ("/exact/", None),
        ("/q?debug=1", Some("query")),
        ("/q?debug=1&skip", None),
        ("/q?debug=2", None),
        ("/r/12", Some("regex")),
        ("/r/12?x", Some("regex")),
        ("/r/1a", None),
    ] {
        assert_eq!(route_name(vh, &req(path)), want, "{path}");
    }
    // Case 4: an inverted value matcher does not match a missing header;
    // present_match: false does.
    assert_eq!(route_name(vh, &req("/inv")), Some("absent"));
    let mut r = req("/inv");
    r.headers.push(("x-a", "2"));
    assert_eq!(route_name(vh, &r), Some("inverted"));
    let mut r = req("/inv");
    r.headers.push(("x-a", "1"));
    assert_eq!(route_name(vh, &r), None);
    // gRPC.
    let mut r = req("/pkg.Svc/Method");
    r.headers.push(("content-type", "application/grpc+proto"));
    assert_eq!(route_name(vh, &r), Some("grpc"));
    assert_eq!(route_name(vh, &req("/pkg.Svc/Method")), None);
}

#[test]
fn repeated_headers_match_value_by_value() {
    // Envoy 1.40 (checked with the differential harness): each value of a
    // repeated header is tested on its own; the matcher passes when any value
    // does, and `invert_match` negates that.
    let rc = ok(r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - name: joined
    match: {prefix: /m, headers: [{name: x-m, string_match: {exact: "a,b"}}]}
    route: {cluster: backend}
  - name: any
    match: {prefix: /m, headers: [{name: x-m, string_match: {exact: "b"}}]}
    route: {cluster: backend}
  - name: range
    match: {prefix: /n, headers: [{name: x-n, range_match: {start: 10, end: 20}}]}
    route: {cluster: backend}
  - name: not-a
    match: {prefix: /i, headers: [{name: x-m, string_match: {exact: "a"}, invert_match: true}]}
    route: {cluster: backend}
"#);
    let vh = &rc.virtual_hosts[0];
    let with = |path: &'static str, headers: &[(&'static str, &'static str)]| {
        let mut r = req(path);
        r.headers.extend_from_slice(headers);
        route_name(vh, &r).map(str::to_string)
    };
    assert_eq!(
        with("/m", &[("x-m", "a"), ("x-m", "b")]).as_deref(),
        Some("any")
    );
    assert_eq!(with("/m", &[("x-m", "a,b")]).as_deref(), Some("joined"));
    assert_eq!(
        with("/n", &[("x-n", "5"), ("x-n", "15")]).as_deref(),
        Some("range")
    );
    assert_eq!(with("/i", &[("x-m", "b"), ("x-m", "a")]), None);
    assert_eq!(
        with("/i", &[("x-m", "b"), ("x-m", "c")]).as_deref(),
        Some("not-a")
    );
}

mod index_property {
    use super::*;
    use proptest::prelude::*;

    /// A random route: a path test over a tiny alphabet (so paths collide often),
    /// sometimes case-insensitive, sometimes with a header condition.
    fn route_yaml() -> impl Strategy<Value = String> {
        let seg = prop::sample::select(vec![
            "", "/", "/a", "/A", "/a/", "/ab", "/a/b", "/b", "/a?x",
        ]);
        (0..5u8, seg, any::<bool>(), any::<bool>()).prop_map(|(kind, s, ci, hdr)| {
            let s = if s.is_empty() { "/" } else { s };
            let m = match kind {
                0 => format!("prefix: \"{s}\""),
                1 => format!("path: \"{s}\""),
                2 => {
                    let p = s.trim_end_matches(['/', '?', 'x']);
                    let p = if p.is_empty() || p.contains('?') {
                        "/a"
                    } else {
                        p
                    };
                    format!("path_separated_prefix: \"{p}\"")
                }
                3 => format!("safe_regex: {{regex: \"{}.*\"}}", s.replace('?', "\\\\?")),
                _ => "prefix: \"\"".to_string(),
            };
            let ci = if ci { ", case_sensitive: false" } else { "" };
            let hdr = if hdr {
                ", headers: [{name: x-h, present_match: true}]"
            } else {
                ""
            };
            format!("{{{m}{ci}{hdr}}}")
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn index_agrees_with_linear_scan(
            routes in prop::collection::vec(route_yaml(), 1..12),
            paths in prop::collection::vec(
                prop::sample::select(vec!["/", "/a", "/A", "/a/", "/a/b", "/ab", "/A/B", "/b", "/a?x", "/a/?y", "/abc", "/a#f", ""]),
                1..8,
            ),
            with_header in any::<bool>(),
        ) {
            let mut yaml = String::from("name: r\nvirtual_hosts:\n- name: a\n  domains: [\"*\"]\n  routes:\n");
            for (i, m) in routes.iter().enumerate() {
                yaml.push_str(&format!("  - name: r{i}\n    match: {m}\n    route: {{cluster: backend}}\n"));
            }
            let rc = ok(&yaml);
            let vh = &rc.virtual_hosts[0];
            for p in paths {
                let mut r = req(p);
                if with_header {
                    r.headers.push(("x-h", "1"));
                }
                let indexed = vh.select_route(&r).map(|r| r.name.clone());
                let linear = vh.select_route_linear(&r).map(|r| r.name.clone());
                prop_assert_eq!(indexed, linear, "path {:?} in\n{}", p, yaml);
            }
        }
    }
}

#[test]
fn route_max_stream_duration() {
    let rc = ok(r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /a}
    route: {cluster: backend, max_stream_duration: {max_stream_duration: 1s}}
  - match: {prefix: /g}
    route: {cluster: backend, max_stream_duration: {grpc_timeout_header_max: 2s, grpc_timeout_header_offset: 0.5s}}
  - match: {prefix: /z}
    route: {cluster: backend, max_stream_duration: {max_stream_duration: 0s}}
  - match: {prefix: /}
    route: {cluster: backend}
"#);
    let vh = &rc.virtual_hosts[0];
    let m = |i: usize| {
        vh.routes[i]
            .route_action()
            .unwrap()
            .max_stream_duration
            .clone()
    };
    let secs = Duration::from_secs;
    let a = m(0).unwrap();
    assert_eq!(a.limit(None), Some(Some(secs(1))));
    // Without grpc_timeout_header_max the header changes nothing.
    assert_eq!(a.limit(Some(secs(9))), Some(Some(secs(1))));
    let g = m(1).unwrap();
    assert_eq!(g.limit(None), None, "no header: the connection manager's");
    assert_eq!(
        g.limit(Some(secs(1))),
        Some(Some(Duration::from_millis(500)))
    );
    assert_eq!(
        g.limit(Some(secs(10))),
        Some(Some(Duration::from_millis(1500)))
    );
    assert_eq!(
        g.limit(Some(Duration::from_millis(300))),
        Some(Some(Duration::ZERO))
    );
    assert_eq!(m(2).unwrap().limit(None), Some(None), "0s: no limit");
    assert_eq!(m(3), None);
    assert_eq!(
        errs(
            "name: r\nvirtual_hosts: [{name: a, domains: ['*'], routes: [{match: {prefix: /}, route: {cluster: backend, max_stream_duration: {grpc_timeout_header_offset: -1s}}}]}]"
        ),
        vec![
            "virtual_hosts[0].routes[0].route.max_stream_duration.grpc_timeout_header_offset: must not be negative"
        ]
    );
}

#[test]
fn route_upgrade_configs() {
    let rc = ok(r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /a}
    route: {cluster: backend, upgrade_configs: [{upgrade_type: WebSocket}, {upgrade_type: h2c, enabled: false}]}
  - match: {prefix: /}
    route: {cluster: backend}
"#);
    let vh = &rc.virtual_hosts[0];
    let a = vh.routes[0].route_action().unwrap();
    assert_eq!(a.upgrade("websocket"), Some(true), "case-insensitive");
    assert_eq!(a.upgrade("WEBSOCKET"), Some(true));
    assert_eq!(a.upgrade("h2c"), Some(false));
    assert_eq!(
        a.upgrade("spdy/3.1"),
        None,
        "left to the connection manager"
    );
    assert_eq!(
        vh.routes[1].route_action().unwrap().upgrade("websocket"),
        None
    );

    let mut got = errs(
        r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /}
    route:
      cluster: backend
      upgrade_configs:
      - {upgrade_type: websocket}
      - {upgrade_type: WebSocket}
      - {upgrade_type: ""}
      - {upgrade_type: CONNECT}
      - {upgrade_type: other, connect_config: {}}
"#,
    );
    got.sort();
    assert_eq!(
        got,
        vec![
            "virtual_hosts[0].routes[0].route.upgrade_configs[1].upgrade_type: Duplicate upgrade WebSocket",
            "virtual_hosts[0].routes[0].route.upgrade_configs[2].upgrade_type: must not be empty",
            "virtual_hosts[0].routes[0].route.upgrade_configs[3].upgrade_type: a CONNECT upgrade on a route is not supported",
            "virtual_hosts[0].routes[0].route.upgrade_configs[4].connect_config: connect_config is not supported",
        ]
    );
}

#[test]
fn virtual_host_metadata_is_kept() {
    let rc = ok(r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  metadata: {filter_metadata: {envoy-gateway: {resources: [{kind: HTTPRoute, name: r1}]}}}
  routes: [{match: {prefix: /}, route: {cluster: backend}}]
- name: b
  domains: ["b"]
  routes: [{match: {prefix: /}, route: {cluster: backend}}]
"#);
    assert_eq!(
        serde_json::Value::Object(rc.virtual_hosts[0].metadata["envoy-gateway"].clone()),
        serde_json::json!({"resources": [{"kind": "HTTPRoute", "name": "r1"}]})
    );
    assert!(rc.virtual_hosts[1].metadata.is_empty());
}

#[test]
fn route_and_virtual_host_rate_limits() {
    let rc = ok(r#"
virtual_hosts:
- name: a
  domains: ["*"]
  rate_limits: [{stage: 2, actions: [{generic_key: {descriptor_value: vh}}]}]
  routes:
  - match: {prefix: /}
    route:
      cluster: backend
      include_vh_rate_limits: true
      rate_limits: [{disable_key: k, actions: [{remote_address: {}}]}]
"#);
    let vh = &rc.virtual_hosts[0];
    assert_eq!(vh.rate_limits[0].stage, 2);
    let Action::Route(ra) = &vh.routes[0].action else {
        panic!()
    };
    assert!(ra.include_vh_rate_limits);
    assert_eq!(ra.rate_limits[0].disable_key, "k");
    let e = errs(
        "virtual_hosts: [{name: a, domains: [\"*\"], rate_limits: [{stage: 11, actions: [{remote_address: {}}]}], routes: []}]",
    );
    assert_eq!(
        e,
        ["virtual_hosts[0].rate_limits[0].stage: must be at most 10"]
    );
}

#[test]
fn direct_response_body_format_rules() {
    // inline_bytes: `\xff%` (not UTF-8, with a '%'), then a PNG-like run
    // of bytes without one.
    let yaml = r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /}
    direct_response: {status: 200, body_format: {text_format_source: {inline_bytes: "/yU="}}}
  - match: {prefix: /}
    direct_response: {status: 200, body_format: {text_format: "%NOPE%"}}
  - match: {prefix: /}
    direct_response: {status: 200, body_format: {text_format_source: {filename: /x}}}
  - match: {prefix: /}
    direct_response: {status: 200, body_format: {text_format: "x", content_type: "a\u0001b"}}
"#;
    assert_eq!(
        errs(yaml),
        vec![
            "virtual_hosts[0].routes[0].direct_response.body_format.text_format_source.inline_bytes: a format in bytes that are not UTF-8 and contain '%' is not supported",
            "virtual_hosts[0].routes[1].direct_response.body_format.text_format: unsupported format command %NOPE%",
            "virtual_hosts[0].routes[2].direct_response.body_format.text_format_source.filename: a format read from a file is not supported",
            "virtual_hosts[0].routes[3].direct_response.body_format.content_type: is not a valid header value",
        ]
    );
    let rc = ok(r#"
name: r
virtual_hosts:
- name: a
  domains: ["*"]
  routes:
  - match: {prefix: /png}
    direct_response: {status: 200, body_format: {text_format_source: {inline_bytes: "iVBORw0KGgo="}}}
  - match: {prefix: /json}
    direct_response: {status: 200, body: {inline_string: b}, body_format: {json_format: {d: "%LOCAL_REPLY_BODY%"}}}
"#);
    let dr = |i: usize| match &rc.virtual_hosts[0].routes[i].action {
        crate::route::Action::DirectResponse(d) => d.clone(),
        other => panic!("{other:?}"),
    };
    let png = dr(0).body_format.unwrap();
    assert!(
        matches!(&png.template, BodyTemplate::Literal(b) if b.starts_with(b"\x89PNG")),
        "{png:?}"
    );
    assert_eq!(png.content_type, "text/plain");
    let json = dr(1);
    assert_eq!(json.body.as_deref(), Some(&b"b"[..]));
    assert_eq!(json.body_format.unwrap().content_type, "application/json");
}

#[test]
fn virtual_clusters_and_route_stat_prefix() {
    let rc = ok(r#"
virtual_hosts:
- name: vh
  domains: ["*"]
  virtual_clusters:
  - name: api
    headers: [{name: ":path", string_match: {prefix: /api}}]
  - name: tagged
    headers: [{name: x-tag, present_match: true}]
  routes:
  - match: {prefix: /}
    stat_prefix: all
    route: {cluster: backend}
"#);
    let vh = &rc.virtual_hosts[0];
    assert_eq!(vh.routes[0].stat_prefix.as_deref(), Some("all"));
    assert_eq!(vh.virtual_cluster(&req("/api/x")), Some("api"));
    let tagged = Req {
        path: "/x",
        headers: vec![("x-tag", "1")],
    };
    assert_eq!(vh.virtual_cluster(&tagged), Some("tagged"));
    assert_eq!(vh.virtual_cluster(&req("/x")), Some("other"));
    let plain = ok(
        "virtual_hosts:\n- {name: v, domains: [\"*\"], routes: [{match: {prefix: /}, route: {cluster: backend}}]}\n",
    );
    assert_eq!(plain.virtual_hosts[0].virtual_cluster(&req("/x")), None);
    assert_eq!(plain.virtual_hosts[0].routes[0].stat_prefix, None);
    assert_eq!(
        errs(
            "virtual_hosts:\n- {name: v, domains: [\"*\"], virtual_clusters: [{headers: []}], routes: []}\n"
        ),
        vec!["virtual_hosts[0].virtual_clusters[0].name: must not be empty"]
    );
}
