use crate::build::{FilterStats, build_chain};
use crate::chain::Verdict;
use crate::request::SelectedRoute;
use crate::test_support::{filter_config, head, now, per_route_config, plain_conn, rsa_key, state};
use courier_config::route::PerFilterConfigs;
use serde_json::json;

fn jwks() -> String {
    json!({ "keys": [rsa_key().jwk.clone()] }).to_string()
}

fn jwt_filter(extra: &str) -> courier_config::filters::HttpFilter {
    filter_config(&format!(
        r#"name: jwt
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
  providers:
    a:
      issuer: https://issuer.example
      local_jwks: {{inline_string: '{}'}}
      payload_in_metadata: p
      claim_to_headers: [{{header_name: x-tenant, claim_name: tenant}}]
{extra}
  rules:
  - match: {{prefix: /}}
    requires: {{provider_name: a}}
"#,
        jwks()
    ))
}

fn rbac_filter() -> courier_config::filters::HttpFilter {
    filter_config(
        r#"name: rbac
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
  rules:
    action: ALLOW
    policies:
      alice:
        permissions: [{any: true}]
        principals:
        - metadata: {filter: envoy.filters.http.jwt_authn, path: [{key: p}, {key: sub}], value: {string_match: {exact: alice}}}
"#,
    )
}

fn router() -> courier_config::filters::HttpFilter {
    filter_config(
        "name: envoy.filters.http.router\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
    )
}

fn token(sub: &str) -> String {
    rsa_key().mint(
        None,
        &json!({"iss": "https://issuer.example", "sub": sub, "tenant": "t1", "exp": now() + 60}),
    )
}

/// envoy-reference 11 case 20: jwt_authn payload_in_metadata read by RBAC's metadata
/// principal.
#[tokio::test]
async fn jwt_payload_in_metadata_feeds_rbac() {
    let (chain, stats) = build_chain(&[jwt_filter(""), rbac_filter(), router()], None).unwrap();
    assert_eq!(chain.entries().len(), 2);
    assert!(matches!(stats[0], FilterStats::JwtAuthn { .. }));
    let conn = plain_conn();
    for (sub, want) in [("alice", 200), ("bob", 403)] {
        let auth = format!("Bearer {}", token(sub));
        let mut req = state(&conn, head("GET", "/x", &[("authorization", &auth)]));
        let got = match chain.decode_headers(&mut req, |_| None).await {
            Verdict::Continue => 200,
            Verdict::Respond(r) => {
                assert_eq!(&r.body[..], b"RBAC: access denied");
                r.status.as_u16()
            }
        };
        assert_eq!(got, want, "{sub}");
    }
    let mut req = state(&conn, head("GET", "/x", &[]));
    let Verdict::Respond(r) = chain.decode_headers(&mut req, |_| None).await else {
        panic!("no token must be refused");
    };
    // jwt_authn answered first; RBAC never ran.
    assert_eq!(&r.body[..], b"Jwt is missing");
}

/// The driver applies `HttpFilter.disabled` and per-route `FilterConfig.disabled`, passes
/// the most specific per-route config, and re-selects the route after a filter cleared the
/// route cache.
#[tokio::test]
async fn disabled_per_route_and_route_reselection() {
    let mut rbac = rbac_filter();
    rbac.disabled = true;
    let (chain, _) =
        build_chain(&[jwt_filter("      clear_route_cache: true"), rbac], None).unwrap();
    let conn = plain_conn();
    let enable = per_route_config(
        "rbac",
        "\"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\nconfig:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBACPerRoute\n  rbac:\n    rules: {action: ALLOW, policies: {}}\n",
    );
    let disable_jwt = per_route_config(
        "jwt",
        "\"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\ndisabled: true\n",
    );
    let mut vhost_level = PerFilterConfigs::new();
    vhost_level.insert("jwt".into(), disable_jwt);
    let mut route_level = PerFilterConfigs::new();
    route_level.insert("rbac".into(), enable);
    // vhost disables jwt; nothing enables rbac: every request passes untouched.
    let vhost_only = SelectedRoute {
        per_filter: [None, None, Some(&vhost_level), None],
        metadata: None,
        cluster: None,
        ..Default::default()
    };
    let mut req = state(&conn, head("GET", "/x", &[]));
    req.route = Some(vhost_only);
    assert!(matches!(
        chain.decode_headers(&mut req, |_| None).await,
        Verdict::Continue
    ));

    // jwt runs (no route config), clears the route cache; the re-selected route enables the
    // (disabled in the HCM) RBAC filter with a deny-all override.
    let reselected = SelectedRoute {
        per_filter: [None, Some(&route_level), None, None],
        metadata: None,
        cluster: None,
        ..Default::default()
    };
    let auth = format!("Bearer {}", token("alice"));
    let mut req = state(&conn, head("GET", "/x", &[("authorization", &auth)]));
    let mut seen_tenant = None;
    let verdict = chain
        .decode_headers(&mut req, |h| {
            seen_tenant = h.headers.get("x-tenant").cloned();
            Some(reselected)
        })
        .await;
    assert_eq!(seen_tenant.unwrap(), "t1");
    assert!(!req.route_cache_cleared());
    let Verdict::Respond(r) = verdict else {
        panic!("the re-selected route's RBAC override must deny");
    };
    assert_eq!(r.status, 403);
}

#[test]
fn ext_authz_needs_a_transport() {
    let f = filter_config(
        "name: authz\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n  http_service: {server_uri: {uri: \"http://authz/\", cluster: authz, timeout: 1s}}\n",
    );
    let err = build_chain(&[f], None).unwrap_err();
    assert!(err.contains("authz"), "{err}");
}

/// Workers spawn request futures with `tokio::spawn`: the driver's future must be `Send`.
#[test]
fn chain_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (chain, _) = build_chain(&[jwt_filter(""), rbac_filter()], None).unwrap();
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    let fut = chain.decode_headers(&mut req, |_| None);
    assert_send(&fut);
}

/// An asynchronous filter: waits, then writes a header and metadata through the
/// `&mut RequestState` its future holds.
struct Slow(Option<crate::chain::BodyWanted>);

impl crate::chain::HttpFilter for Slow {
    fn decode_headers<'r>(
        &'r self,
        req: &'r mut crate::request::RequestState<'_>,
        _: Option<&'r courier_config::filters::PerRouteFilterConfig>,
    ) -> crate::chain::Decision<'r> {
        crate::chain::Decision::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            req.head
                .headers
                .insert("x-slow", http::HeaderValue::from_static("1"));
            req.set_metadata("slow", "done", json!(true));
            Verdict::Continue
        }))
    }

    fn wants_body(&self) -> Option<crate::chain::BodyWanted> {
        self.0
    }

    fn encode_headers(&self, _: &crate::request::RequestState<'_>, h: &mut http::HeaderMap) {
        h.insert("x-slow-response", http::HeaderValue::from_static("1"));
    }
}

#[tokio::test]
async fn pending_filter_resumes_and_later_filters_see_its_effects() {
    use crate::chain::{BodyWanted, ChainEntry, FilterChain};
    let entry = |name: &str, f: Box<dyn crate::chain::HttpFilter>| ChainEntry {
        name: name.into(),
        disabled: false,
        filter: f,
    };
    let (rbac_only, _) = build_chain(&[rbac_filter()], None).unwrap();
    let mut entries = vec![entry(
        "slow",
        Box::new(Slow(Some(BodyWanted {
            max_bytes: 10,
            allow_partial: true,
        }))),
    )];
    entries.push(entry(
        "slow2",
        Box::new(Slow(Some(BodyWanted {
            max_bytes: 100,
            allow_partial: false,
        }))),
    ));
    entries.extend(rbac_only.into_entries());
    let chain = FilterChain::new(entries);
    assert_eq!(
        chain.wants_body(),
        Some(BodyWanted {
            max_bytes: 100,
            allow_partial: false
        })
    );
    let conn = plain_conn();
    let mut req = state(&conn, head("GET", "/", &[]));
    req.set_metadata("envoy.filters.http.jwt_authn", "p", json!({"sub": "alice"}));
    assert!(matches!(
        chain.decode_headers(&mut req, |_| None).await,
        Verdict::Continue
    ));
    assert_eq!(req.head.headers["x-slow"], "1");
    assert_eq!(req.metadata["slow"]["done"], true);
    // Writing a second namespace key merged with what jwt_authn wrote.
    assert_eq!(
        req.metadata["envoy.filters.http.jwt_authn"]["p"]["sub"],
        "alice"
    );
    let mut resp = http::HeaderMap::new();
    chain.encode_headers(&req, &mut resp);
    assert_eq!(resp["x-slow-response"], "1");
}

/// The use control planes make of `normalize_payload_in_metadata` (Envoy Gateway's
/// SecurityPolicy scopes): RBAC's metadata principal matches one scope of a
/// space-delimited `scope` claim with `list_match`. Without the normalization the claim is
/// one string and no list matcher can match it.
#[tokio::test]
async fn normalized_scope_claim_feeds_rbac_list_match() {
    let rbac = filter_config(
        r#"name: rbac
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
  rules:
    action: ALLOW
    policies:
      writers:
        permissions: [{any: true}]
        principals:
        - metadata: {filter: envoy.filters.http.jwt_authn, path: [{key: p}, {key: scope}], value: {list_match: {one_of: {string_match: {exact: write}}}}}
"#,
    );
    let conn = plain_conn();
    for (normalize, scope, want) in [
        (true, "read write", 200),
        (true, "read", 403),
        (false, "read write", 403),
    ] {
        let extra = if normalize {
            "      normalize_payload_in_metadata: {space_delimited_claims: [scope]}"
        } else {
            ""
        };
        let (chain, _) = build_chain(&[jwt_filter(extra), rbac.clone(), router()], None).unwrap();
        let t = rsa_key().mint(
            None,
            &json!({"iss": "https://issuer.example", "sub": "s", "scope": scope, "exp": now() + 60}),
        );
        let auth = format!("Bearer {t}");
        let mut req = state(&conn, head("GET", "/x", &[("authorization", &auth)]));
        let got = match chain.decode_headers(&mut req, |_| None).await {
            Verdict::Continue => 200,
            Verdict::Respond(r) => r.status.as_u16(),
        };
        assert_eq!(got, want, "normalize {normalize}, scope {scope:?}");
    }
}
