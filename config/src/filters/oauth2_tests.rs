use crate::filters::{HttpFilterConfig, PerRouteFilterConfig};
use crate::listener::test_util::{hcm, load};
use serde_json::{Value, json};

/// An `OAuth2Config` as Envoy Gateway writes it, with `patch` merged over it.
fn oauth_config(patch: Value) -> Value {
    let mut c = json!({
        "token_endpoint": {"cluster": "idp", "uri": "https://idp.example/token", "timeout": "5s"},
        "authorization_endpoint": "https://idp.example/auth",
        "credentials": {
            "client_id": "client1",
            "token_secret": {"name": "client-secret"},
            "hmac_secret": {"name": "hmac"},
        },
        "redirect_uri": "https://app.example/oauth2/callback",
        "redirect_path_matcher": {"path": {"exact": "/oauth2/callback"}},
        "signout_path": {"path": {"exact": "/logout"}},
    });
    if let (Some(o), Value::Object(p)) = (c.as_object_mut(), patch) {
        o.extend(p);
    }
    c
}

/// A bootstrap with the oauth2 filter (`filter` as its `OAuth2`), a route carrying
/// `per_route` (if any) and the two generic secrets.
fn bootstrap(filter: Value, per_route: Option<Value>) -> Value {
    let mut route = json!({"match": {"prefix": "/"}, "route": {"cluster": "idp"}});
    if let Some(p) = per_route {
        route["typed_per_filter_config"] = json!({"envoy.filters.http.oauth2": p});
    }
    let mut filter = filter;
    filter["@type"] = json!(crate::extensions::OAUTH2);
    let mut b = hcm(json!({
        "http_filters": [
            {"name": "envoy.filters.http.oauth2", "typed_config": filter},
            {"name": "envoy.filters.http.router", "typed_config": {"@type": crate::extensions::ROUTER}},
        ],
        "route_config": {"name": "r", "virtual_hosts": [{"name": "v", "domains": ["*"], "routes": [route]}]},
    }));
    b["static_resources"]["secrets"] = json!([
        {"name": "client-secret", "generic_secret": {"secret": {"inline_string": "s3cret"}}},
        {"name": "hmac", "generic_secret": {"secret": {"inline_bytes": "aG1hYw=="}}},
    ]);
    b["static_resources"]["clusters"] = json!([{"name": "idp", "connect_timeout": "1s",
        "load_assignment": {"cluster_name": "idp", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 1}}}}]}]}}]);
    b
}

fn err(v: &Value) -> String {
    load(v).unwrap_err().to_string()
}

const FILTER: &str = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0].typed_config.config";

#[test]
fn filter_config_reads_secrets_defaults_and_fields() {
    let b = load(&bootstrap(
        json!({"config": oauth_config(json!({
            "auth_type": "BASIC_AUTH",
            "auth_scopes": ["openid", "email"],
            "default_expires_in": "3600s",
            "deny_redirect_matcher": [{"name": "x-api", "string_match": {"exact": "1"}}],
            "cookie_configs": {"bearer_token_cookie_config": {"same_site": "LAX", "path": "/app"}},
        }))}),
        None,
    ))
    .unwrap();
    let hcm = b.listeners[0]
        .all_filter_chains()
        .next()
        .unwrap()
        .hcm()
        .unwrap();
    let HttpFilterConfig::OAuth2(o) = &hcm.http_filters[0].config else {
        panic!("oauth2")
    };
    let c = o.config.as_ref().unwrap();
    assert_eq!(c.client_secret, b"s3cret");
    assert_eq!(c.hmac_secret, b"hmac");
    assert_eq!(c.auth_type, super::AuthType::BasicAuth);
    assert_eq!(c.cookie_names.bearer_token, "BearerToken");
    assert_eq!(c.cookie_names.code_verifier, "CodeVerifier");
    assert_eq!(c.auth_scopes, ["openid", "email"]);
    assert_eq!(c.default_expires_in.as_secs(), 3600);
    assert_eq!(c.default_refresh_token_expires_in.as_secs(), 604_800);
    assert_eq!(c.csrf_token_expires_in.as_secs(), 600);
    assert!(c.use_refresh_token);
    assert_eq!(c.cookie_configs.bearer_token.path, "/app");
    assert_eq!(
        c.cookie_configs.bearer_token.same_site,
        super::SameSite::Lax
    );
    assert_eq!(c.cookie_configs.oauth_hmac.path, "/");
    assert_eq!(c.deny_redirect_matcher.len(), 1);
    assert!(c.redirect_path_matcher.matches("/oauth2/callback"));
}

#[test]
fn empty_filter_config_with_per_route_config() {
    let b = load(&bootstrap(
        json!({}),
        Some(json!({"@type": crate::extensions::OAUTH2_PER_ROUTE, "config": oauth_config(json!({"auth_scopes": []}))})),
    ))
    .unwrap();
    let hcm = b.listeners[0]
        .all_filter_chains()
        .next()
        .unwrap()
        .hcm()
        .unwrap();
    let HttpFilterConfig::OAuth2(o) = &hcm.http_filters[0].config else {
        panic!("oauth2")
    };
    assert!(o.config.is_none());
    let crate::listener::hcm::RouteSpecifier::Inline(rc) = &hcm.route_specifier else {
        panic!("inline routes")
    };
    let pr = &rc.virtual_hosts[0].routes[0].typed_per_filter_config["envoy.filters.http.oauth2"];
    let Some(PerRouteFilterConfig::OAuth2(p)) = &pr.config else {
        panic!("per-route")
    };
    assert_eq!(p.config.auth_scopes, ["user"]);
}

#[test]
fn refusals_name_the_field() {
    let with = |patch: Value| bootstrap(json!({"config": oauth_config(patch)}), None);
    let e = err(&with(
        json!({"end_session_endpoint": "https://idp.example/logout"}),
    ));
    assert!(e.contains(&format!("{FILTER}.end_session_endpoint")), "{e}");
    let e = err(&with(json!({"allow_failed_matcher": [{"name": "x"}]})));
    assert!(e.contains(&format!("{FILTER}.allow_failed_matcher")), "{e}");
    let e = err(&with(json!({"auth_type": "PRIVATE_KEY_JWT"})));
    assert!(
        e.contains(&format!(
            "{FILTER}.auth_type: auth_type PRIVATE_KEY_JWT is not supported"
        )),
        "{e}"
    );
    let e = err(&with(json!({"redirect_uri": "%REQ(:authority)%/cb"})));
    assert!(
        e.contains(&format!(
            "{FILTER}.redirect_uri: a redirect_uri with command operators"
        )),
        "{e}"
    );
    let e = err(&with(
        json!({"credentials": {"client_id": "c", "token_secret": {"name": "nope"}, "hmac_secret": {"name": "hmac"}}}),
    ));
    assert!(
        e.contains(&format!(
            "{FILTER}.credentials.token_secret.name: Unknown static secret: nope"
        )),
        "{e}"
    );
    let sds =
        json!({"name": "hmac", "sds_config": {"path_config_source": {"path": "/tmp/x.yaml"}}});
    let e = err(&with(
        json!({"credentials": {"client_id": "c", "token_secret": {"name": "client-secret"}, "hmac_secret": sds}}),
    ));
    assert!(e.contains(&format!("{FILTER}.credentials.hmac_secret.sds_config: a generic secret from SDS (sds_config) is not supported")), "{e}");
    let e = err(&with(
        json!({"forward_bearer_token": true, "preserve_authorization_header": true}),
    ));
    assert!(
        e.contains(&format!(
            "{FILTER}: invalid OAuth2 configuration: at most one of forward_bearer_token"
        )),
        "{e}"
    );
    let e = err(&with(
        json!({"forward_bearer_token": true, "forward_id_token": {"header": "Authorization"}}),
    ));
    assert!(e.contains("at most one of forward_bearer_token"), "{e}");
    let e = err(&with(json!({"forward_id_token": {"header": "Host"}})));
    assert!(e.contains(&format!("{FILTER}.forward_id_token.header: invalid forward_id_token configuration: header 'Host' can not be used")), "{e}");
    let e = err(&with(json!({"authorization_endpoint": "not a url"})));
    assert!(e.contains("invalid authorization endpoint URL"), "{e}");
    let e = err(&bootstrap(
        json!({}),
        Some(json!({"@type": crate::extensions::OAUTH2_PER_ROUTE})),
    ));
    assert!(
        e.contains("typed_per_filter_config[\"envoy.filters.http.oauth2\"].config: is required"),
        "{e}"
    );
}

#[test]
fn generic_secrets_load_and_refuse_the_named_map() {
    let mut b = bootstrap(json!({}), None);
    b["static_resources"]["secrets"][0]["generic_secret"]["secrets"] =
        json!({"k": {"inline_string": "v"}});
    let e = err(&b);
    assert!(
        e.contains("static_resources.secrets[0].generic_secret.secrets"),
        "{e}"
    );
    let mut b = bootstrap(json!({}), None);
    b["static_resources"]["secrets"][1]["name"] = json!("client-secret");
    let e = err(&b);
    assert!(
        e.contains("Duplicate static GenericSecret secret name client-secret"),
        "{e}"
    );
}
