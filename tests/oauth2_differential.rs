//! The OAuth2 filter (`envoy.filters.http.oauth2`, Envoy Gateway's OIDC cases) beside
//! real Envoy 1.40, from one bootstrap, with a token endpoint stand-in (a small hyper
//! server on loopback answering JSON tokens) and an echo upstream. Per proxy, one
//! scenario: the redirect of an unauthenticated request (status, `Location` with its
//! random `state` and `code_challenge` masked, the decoded state's URL, `Set-Cookie`
//! names and attributes), a `deny_redirect_matcher` 401, a `pass_through_matcher`
//! request, sign-out, a callback with a forged state (401), the callback with the
//! state and cookies of the redirect (the token endpoint's request: method, path,
//! headers, form body with the PKCE verifier checked against the challenge; the
//! `Set-Cookie`s and `Location`), a request with the session cookies (what the
//! upstream receives: `Authorization: Bearer <access token>`), a request with only
//! the refresh token cookie (refreshed through the token endpoint), and the
//! `oauth_*` counters. Two listeners: BASIC_AUTH with encrypted tokens; and
//! URL_ENCODED_BODY with `cookie_domain`, cookie configs and plain tokens, set as a
//! route's `OAuth2PerRoute` under an empty filter (Envoy Gateway's shape).
//!
//! ```text
//! cargo build -p courier
//! COURIER_ENVOY=/work/main/.venv/bin/envoy cargo test -p courier-tests --test oauth2_differential -- --nocapture
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use courier_tests::client::{self, Protocol, Request, Response};
use courier_tests::differential::{bootstrap, hcm_listener_filters, indent, same_lines};
use courier_tests::proxies::{Kind, Proxy};
use courier_tests::{courier_bin, echo_upstream};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;

const TOKENS: &str =
    r#"{"access_token":"at-1","id_token":"id-1","refresh_token":"rt-1","expires_in":3600}"#;

/// Starts the token endpoint: every request is reported on `tx` (method, target,
/// the headers that matter, body) and answered with [`TOKENS`].
fn token_server(tx: mpsc::Sender<String>) -> SocketAddr {
    let (addr_tx, addr_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(l.local_addr().unwrap()).unwrap();
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let tx = tx.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let h = |n: &str| {
                                parts
                                    .headers
                                    .get(n)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or("-")
                                    .to_string()
                            };
                            let _ = tx.send(format!(
                                "{} {} host={} content-type={} accept={} authorization={} body={}",
                                parts.method,
                                parts.uri,
                                h("host"),
                                h("content-type"),
                                h("accept"),
                                h("authorization"),
                                String::from_utf8_lossy(&body)
                            ));
                            // `code=BAD`: the token endpoint fails.
                            let bad = body.starts_with(b"grant_type=authorization_code&code=BAD");
                            let r = hyper::Response::builder()
                                .status(if bad { 500 } else { 200 })
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(if bad { "{}" } else { TOKENS })))
                                .unwrap();
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
    });
    addr_rx.recv().unwrap()
}

/// The filter-level config of listener `oa` (BASIC_AUTH, encrypted tokens).
const OA: &str = r#"- name: envoy.filters.http.oauth2
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.oauth2.v3.OAuth2
    config:
      token_endpoint: { cluster: idp, uri: "http://idp.test/oauth/token", timeout: 5s }
      authorization_endpoint: "https://auth.test/oauth2/auth?prompt=consent"
      credentials:
        client_id: client.one
        token_secret: { name: client-secret }
        hmac_secret: { name: hmac }
        cookie_names: { bearer_token: AccessToken-1, oauth_hmac: OauthHMAC-1 }
      redirect_uri: "https://app.test/oauth2/callback"
      redirect_path_matcher: { path: { exact: /oauth2/callback } }
      signout_path: { path: { exact: /logout } }
      forward_bearer_token: true
      pass_through_matcher: [{ name: x-pass, present_match: true }]
      deny_redirect_matcher: [{ name: x-api, string_match: { exact: "1" } }]
      auth_scopes: [openid, email]
      resources: [api, "https://r.test/x"]
      auth_type: BASIC_AUTH
      stat_prefix: oa
"#;

/// Listener `ob`: an empty filter, the config on the route (Envoy Gateway's shape).
const OB: &str = r#"- name: envoy.filters.http.oauth2
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.oauth2.v3.OAuth2
"#;

const OB_VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
    typed_per_filter_config:
      envoy.filters.http.oauth2:
        "@type": type.googleapis.com/envoy.extensions.filters.http.oauth2.v3.OAuth2PerRoute
        config:
          token_endpoint: { cluster: idp, uri: "http://idp.test/token", timeout: 5s }
          authorization_endpoint: "https://auth.test/authorize"
          credentials:
            client_id: "client:two"
            token_secret: { name: client-secret }
            hmac_secret: { name: hmac }
            cookie_domain: app.test
          redirect_uri: "https://app.test/cb"
          redirect_path_matcher: { path: { exact: /cb } }
          signout_path: { path: { prefix: /signout } }
          forward_bearer_token: true
          forward_id_token: { header: X-ID-Token }
          use_refresh_token: false
          default_expires_in: 600s
          disable_token_encryption: true
          cookie_configs:
            oauth_hmac_cookie_config: { same_site: LAX, path: /app }
            bearer_token_cookie_config: { same_site: STRICT, partitioned: true }
          stat_prefix: ob
"#;

const VHOSTS: &str = r#"- name: all
  domains: ["*"]
  routes:
  - match: { prefix: "/" }
    route: { cluster: up }
"#;

fn cluster(name: &str, port: u16) -> String {
    format!(
        "- name: {name}\n  connect_timeout: 2s\n  load_assignment:\n    cluster_name: {name}\n    endpoints:\n    - lb_endpoints:\n      - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}\n"
    )
}

fn yaml(up: SocketAddr, idp: SocketAddr) -> String {
    format!(
        "{}  clusters:\n{}\n{}\n  secrets:\n{}\n",
        bootstrap(&[
            hcm_listener_filters("oa", "", OA, VHOSTS),
            hcm_listener_filters("ob", "", OB, OB_VHOSTS),
        ]),
        indent(&cluster("up", up.port()), 2),
        indent(&cluster("idp", idp.port()), 2),
        indent(
            "- name: client-secret\n  generic_secret: { secret: { inline_string: \"s3cr:et\" } }\n- name: hmac\n  generic_secret: { secret: { inline_bytes: \"qrOYACHXoe7UEDI/raOjNSx+Z9ufXSc/22C3T6X/zPY=\" } }\n",
            2
        ),
    )
}

fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    client::send(
        addr,
        Protocol::Http1,
        &Request {
            method: "GET".into(),
            path: path.into(),
            authority: "app.test".into(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        },
    )
    .unwrap()
}

fn set_cookies(r: &Response) -> Vec<&str> {
    r.headers
        .iter()
        .filter(|(k, _)| k == "set-cookie")
        .map(|(_, v)| v.as_str())
        .collect()
}

/// A `Set-Cookie` with its value masked (unless `deleted` or `keep`) and the flow id
/// in its name masked: what must match between proxies.
fn masked_cookie(c: &str, flow: &str, keep: bool) -> String {
    let (name, rest) = c.split_once('=').unwrap();
    let (value, attrs) = rest.split_once(';').unwrap_or((rest, ""));
    let name = if flow.is_empty() {
        name.to_string()
    } else {
        name.replace(flow, "<flow>")
    };
    let value = if keep || value == "deleted" {
        value
    } else {
        "<v>"
    };
    format!("{name}={value};{attrs}")
}

/// `name=value` of a `Set-Cookie`.
fn pair(c: &str) -> &str {
    c.split(';').next().unwrap()
}

fn query_param<'a>(url: &'a str, name: &str) -> &'a str {
    let q = url.split_once('?').map_or("", |(_, q)| q);
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map_or("", |(_, v)| v)
}

fn masked_location(loc: &str) -> String {
    let mut out = loc.to_string();
    for p in ["state", "code_challenge"] {
        let v = query_param(loc, p);
        if !v.is_empty() {
            out = out.replace(&format!("{p}={v}"), &format!("{p}=<{p}>"));
        }
    }
    out
}

/// Drains the token endpoint's reports, the verifier masked after checking it
/// against `challenge`.
fn token_requests(rx: &mpsc::Receiver<String>, challenge: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(r) = rx.recv_timeout(std::time::Duration::from_millis(300)) {
        let verifier = r.split("code_verifier=").nth(1).unwrap_or("");
        if !verifier.is_empty() {
            let digest = aws_lc_rs_sha256(verifier.as_bytes());
            out.push(format!(
                "pkce matches: {}",
                URL_SAFE_NO_PAD.encode(digest) == challenge
            ));
        }
        out.push(if verifier.is_empty() {
            r.clone()
        } else {
            r.replace(verifier, "<verifier>")
        });
    }
    out
}

fn aws_lc_rs_sha256(data: &[u8]) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .to_vec()
}

fn observe(kind: Kind, bin: &Path) -> Vec<String> {
    let up = echo_upstream::start(&[
        "authorization",
        "x-id-token",
        "cookie",
        "x-envoy-oauth-status",
    ]);
    let (tx, rx) = mpsc::channel();
    let idp = token_server(tx);
    let p = Proxy::start(kind, bin, &yaml(up, idp), &["oa", "ob"]).unwrap();
    let mut out = Vec::new();
    for listener in ["oa", "ob"] {
        let addr = p.listener(listener).unwrap();
        let cb = if listener == "oa" {
            "/oauth2/callback"
        } else {
            "/cb"
        };
        // 1. No session: the redirect.
        let r = get(addr, "/page?x=1", &[("authorization", "Bearer spoofed")]);
        let loc = r.header("location").unwrap_or_default();
        let state = query_param(&loc, "state").to_string();
        let challenge = query_param(&loc, "code_challenge").to_string();
        let decoded: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&state).unwrap_or_default())
                .unwrap_or_default();
        let flow = decoded["flow_id"].as_str().unwrap_or("").to_string();
        out.push(format!(
            "{listener} redirect {} {}",
            r.status,
            masked_location(&loc)
        ));
        out.push(format!(
            "{listener} state url={} flow_id_len={} csrf_starts_with_flow={}",
            decoded["url"],
            flow.len(),
            decoded["csrf_token"]
                .as_str()
                .unwrap_or("")
                .starts_with(&format!("{flow}."))
        ));
        let flow_cookies: Vec<String> = set_cookies(&r)
            .iter()
            .map(|c| pair(c).to_string())
            .collect();
        for c in set_cookies(&r) {
            out.push(format!(
                "{listener} redirect set-cookie {}",
                masked_cookie(c, &flow, false)
            ));
        }
        // The same over h2c (`:scheme` http).
        let r = client::send(
            addr,
            Protocol::H2c,
            &Request {
                method: "GET".into(),
                path: "/h2?y=2".into(),
                authority: "app.test".into(),
                headers: Vec::new(),
                body: Vec::new(),
            },
        )
        .unwrap();
        let h2_loc = r.header("location").unwrap_or_default();
        let h2_state: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(query_param(&h2_loc, "state"))
                .unwrap_or_default(),
        )
        .unwrap_or_default();
        out.push(format!(
            "{listener} h2c redirect {} {} url={} set-cookies={}",
            r.status,
            masked_location(&h2_loc),
            h2_state["url"],
            set_cookies(&r).len()
        ));
        // 2. deny_redirect_matcher, 3. pass_through_matcher.
        let r = get(addr, "/api", &[("x-api", "1")]);
        out.push(format!(
            "{listener} deny {} {:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
        let r = get(
            addr,
            "/p",
            &[("x-pass", "y"), ("authorization", "Bearer keep")],
        );
        out.push(format!(
            "{listener} pass {} {:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
        // 4. Sign-out.
        let r = get(
            addr,
            if listener == "oa" {
                "/logout"
            } else {
                "/signout/x"
            },
            &[("cookie", "OauthNonce.abc=1; CodeVerifier=2")],
        );
        out.push(format!(
            "{listener} signout {} {:?}",
            r.status,
            r.header("location")
        ));
        // The flow cookies' deletions come in the order of Envoy's hash map of the
        // request's cookies: sorted here.
        let mut deleted: Vec<String> = set_cookies(&r)
            .iter()
            .map(|c| format!("{listener} signout set-cookie {c}"))
            .collect();
        deleted.sort();
        out.extend(deleted);
        // 5. A forged state, then the real callback.
        let forged = URL_SAFE_NO_PAD
            .encode(r#"{"url":"https://evil.test/","csrf_token":"x.y","flow_id":"f"}"#);
        let r = get(
            addr,
            &format!("{cb}?code=c0&state={forged}"),
            &[("cookie", &flow_cookies.join("; "))],
        );
        out.push(format!(
            "{listener} forged {} {:?} {:?}",
            r.status,
            String::from_utf8_lossy(&r.body),
            set_cookies(&r)
        ));
        // The token endpoint fails: 401, the flow's cookies deleted.
        let r = get(
            addr,
            &format!("{cb}?code=BAD&state={state}"),
            &[("cookie", &flow_cookies.join("; "))],
        );
        out.push(format!(
            "{listener} token-failure {} {:?}",
            r.status,
            String::from_utf8_lossy(&r.body)
        ));
        for c in set_cookies(&r) {
            out.push(format!(
                "{listener} token-failure set-cookie {}",
                masked_cookie(c, &flow, false)
            ));
        }
        out.extend(
            token_requests(&rx, &challenge)
                .into_iter()
                .map(|l| format!("{listener} token-endpoint {l}")),
        );
        let r = get(
            addr,
            &format!("{cb}?code=CODE1&state={state}"),
            &[("cookie", &flow_cookies.join("; "))],
        );
        out.push(format!(
            "{listener} callback {} {:?}",
            r.status,
            r.header("location")
        ));
        let mut session = Vec::new();
        for c in set_cookies(&r) {
            let name = pair(c).split('=').next().unwrap_or("");
            // The expiry's value is the clock's; the plain tokens are compared.
            let keep = listener == "ob" && !name.starts_with("Oauth");
            out.push(format!(
                "{listener} callback set-cookie {}",
                masked_cookie(c, &flow, keep)
            ));
            if !c.contains("=deleted") {
                session.push(pair(c).to_string());
            }
        }
        out.extend(
            token_requests(&rx, &challenge)
                .into_iter()
                .map(|l| format!("{listener} token-endpoint {l}")),
        );
        // 6. With the session: the upstream gets the bearer token.
        let r = get(
            addr,
            "/page?x=1",
            &[
                ("cookie", &session.join("; ")),
                ("authorization", "Bearer spoofed"),
            ],
        );
        let body = String::from_utf8_lossy(&r.body).into_owned();
        let auth: Vec<&str> = body.lines().filter(|l| !l.starts_with("cookie")).collect();
        out.push(format!("{listener} session {} {auth:?}", r.status));
        // 7. Only the refresh token: refreshed (oa), or redirected (ob: use_refresh_token false).
        let refresh: Vec<&String> = session
            .iter()
            .filter(|c| c.starts_with("RefreshToken"))
            .collect();
        if let Some(rt) = refresh.first() {
            let r = get(addr, "/again", &[("cookie", rt)]);
            let body = String::from_utf8_lossy(&r.body).into_owned();
            let auth: Vec<&str> = body.lines().filter(|l| !l.starts_with("cookie")).collect();
            out.push(format!("{listener} refresh {} {auth:?}", r.status));
            for c in set_cookies(&r) {
                out.push(format!(
                    "{listener} refresh set-cookie {}",
                    masked_cookie(c, "", false)
                ));
            }
            out.extend(
                token_requests(&rx, "")
                    .into_iter()
                    .map(|l| format!("{listener} token-endpoint {l}")),
            );
        }
    }
    let stats = client::get(&p.admin, "/stats").unwrap();
    let mut stats: Vec<String> = String::from_utf8_lossy(&stats.body)
        .lines()
        .filter(|l| {
            l.contains(".oauth_")
                && !l.contains("cookie")
                && !l.contains("legacy")
                && !l.contains("allow_failed")
        })
        .map(|l| format!("stat {l}"))
        .collect();
    stats.sort();
    out.extend(stats);
    out
}

#[test]
fn oauth2_as_envoy() {
    let Some(lines) = same_lines(observe) else {
        // No Envoy: courier's own expectations still hold.
        let lines = observe(Kind::Courier, &courier_bin());
        check_courier(&lines);
        return;
    };
    check_courier(&lines);
}

/// courier's explicit expectations, so that two wrong answers cannot both pass.
fn check_courier(lines: &[String]) {
    let has = |s: &str| lines.iter().any(|l| l == s);
    let find = |prefix: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(
        find("oa redirect 302"),
        "oa redirect 302 https://auth.test/oauth2/auth?client_id=client.one&code_challenge=<code_challenge>&code_challenge_method=S256&prompt=consent&redirect_uri=https%3A%2F%2Fapp.test%2Foauth2%2Fcallback&response_type=code&scope=openid%20email&state=<state>&resource=api&resource=https%3A%2F%2Fr.test%2Fx"
    );
    assert!(
        has("oa state url=\"http://app.test/page?x=1\" flow_id_len=16 csrf_starts_with_flow=true"),
        "{lines:#?}"
    );
    assert!(
        has("oa redirect set-cookie OauthNonce.<flow>=<v>;path=/;Max-Age=600;secure;HttpOnly"),
        "{lines:#?}"
    );
    assert!(
        has("oa redirect set-cookie CodeVerifier=<v>;path=/;Max-Age=600;secure;HttpOnly"),
        "{lines:#?}"
    );
    assert!(
        find("oa h2c redirect 302 https://auth.test/oauth2/auth?")
            .ends_with("url=\"http://app.test/h2?y=2\" set-cookies=4"),
        "{lines:#?}"
    );
    assert!(has("oa deny 401 \"OAuth flow failed.\""), "{lines:#?}");
    assert!(
        has("oa pass 200 \"/p\\nauthorization: Bearer keep\\n\""),
        "{lines:#?}"
    );
    assert!(
        has(
            "oa signout set-cookie OauthHMAC-1=deleted; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT"
        ),
        "{lines:#?}"
    );
    assert!(
        find("oa forged 401").contains("OAuth flow failed."),
        "{lines:#?}"
    );
    assert!(
        has("oa token-failure 401 \"OAuth flow failed.\""),
        "{lines:#?}"
    );
    assert!(
        has(
            "oa token-failure set-cookie OauthNonce.<flow>=deleted; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT"
        ),
        "{lines:#?}"
    );
    assert!(
        has("oa callback 302 Some(\"http://app.test/page?x=1\")"),
        "{lines:#?}"
    );
    assert!(
        has("oa callback set-cookie OauthHMAC-1=<v>;path=/;Max-Age=3600;secure;HttpOnly"),
        "{lines:#?}"
    );
    assert!(
        has("oa callback set-cookie RefreshToken=<v>;path=/;Max-Age=604800;secure;HttpOnly"),
        "{lines:#?}"
    );
    assert!(has("oa token-endpoint pkce matches: true"), "{lines:#?}");
    assert!(
        has(
            "oa token-endpoint POST /oauth/token host=idp.test content-type=application/x-www-form-urlencoded accept=application/json authorization=Basic Y2xpZW50Lm9uZTpzM2NyOmV0 body=grant_type=authorization_code&code=CODE1&redirect_uri=https%3A%2F%2Fapp.test%2Foauth2%2Fcallback&code_verifier=<verifier>"
        ),
        "{lines:#?}"
    );
    // The end-to-end check: the session cookies of the callback let the request
    // through, with the access token as bearer (the spoofed one removed).
    assert!(
        has("oa session 200 [\"/page?x=1\", \"authorization: Bearer at-1\"]"),
        "{lines:#?}"
    );
    assert!(
        has("oa refresh 200 [\"/again\", \"authorization: Bearer at-1\"]"),
        "{lines:#?}"
    );
    assert!(
        has(
            "ob callback set-cookie OauthHMAC=<v>;domain=app.test;path=/app;Max-Age=3600;secure;HttpOnly;SameSite=Lax"
        ),
        "{lines:#?}"
    );
    assert!(
        has(
            "ob callback set-cookie BearerToken=at-1;domain=app.test;path=/;Max-Age=3600;secure;HttpOnly;SameSite=Strict;Partitioned"
        ),
        "{lines:#?}"
    );
    assert!(
        has(
            "ob token-endpoint POST /token host=idp.test content-type=application/x-www-form-urlencoded accept=application/json authorization=- body=grant_type=authorization_code&code=CODE1&client_id=client%3Atwo&client_secret=s3cr%3Aet&redirect_uri=https%3A%2F%2Fapp.test%2Fcb&code_verifier=<verifier>"
        ),
        "{lines:#?}"
    );
    assert!(
        has("ob session 200 [\"/page?x=1\", \"authorization: Bearer at-1\", \"x-id-token: id-1\"]"),
        "{lines:#?}"
    );
    assert!(has("stat http.oa.oa.oauth_success: 3"), "{lines:#?}");
    assert!(has("stat ob.oauth_unauthorized_rq: 4"), "{lines:#?}");
}
