//! courier's LDS beyond the ADS lifecycle (xds_lds.rs): listeners from a
//! watched `path_config_source` file; a listener whose jwt_authn fetches its
//! JWKS at start-up warms until the fetch is done (and `/ready` waits); Envoy
//! and courier agree on an LDS scenario (partial NACK, update, removal) and on
//! in-place filter chain updates (only the changed chain's connections drain)
//! and on `/ready` while a listener warms at boot.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod jwt_support;
mod support;
mod xds_support;

use envoy_types::pb::envoy::config::listener::v3::Listener;
use prost::Name;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use xds_support::lds::*;
use xds_support::*;

#[tokio::test]
async fn listeners_from_a_watched_file_are_added_updated_and_removed() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let files = tempfile::tempdir().unwrap();
        let lds = files.path().join("lds.yaml");
        let write = |version: &str, listeners: &[String]| {
            let tmp = files.path().join("lds.tmp");
            std::fs::write(
                &tmp,
                format!("version_info: \"{version}\"\nresources:\n{}", listeners.concat()),
            )
            .unwrap();
            // Atomic replace, as config pushers do.
            std::fs::rename(&tmp, &lds).unwrap();
        };
        write("1", &[listener_yaml("one", "one-v1")]);
        let config = format!(
            "admin:\n  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}\ndynamic_resources:\n  lds_config: {{path_config_source: {{path: {}}}, resource_api_version: V3}}\n",
            lds.display()
        );
        let c = start(&config).await;
        let one = port_of(&c.admin, "one").await;
        until(one, |r| r.body == "one-v1").await;

        write(
            "2",
            &[listener_yaml("one", "one-v2"), listener_yaml("two", "two-v1")],
        );
        let two = port_of(&c.admin, "two").await;
        until(two, |r| r.body == "two-v1").await;
        until(one, |r| r.body == "one-v2").await;
        assert_eq!(listed(&c.admin, "one").await, Some(one));

        // The file is the complete set: a listener left out is removed.
        write("3", &[listener_yaml("two", "two-v1")]);
        until_refused(one).await;
        assert_eq!(listed(&c.admin, "one").await, None);
        assert_eq!(H1::connect(two).await.get("/", &[]).await.body, "two-v1");
        assert_eq!(
            stat_of(&c.admin, "listener_manager.lds.update_success").await,
            3
        );
    })
    .await
    .expect("in time");
}

#[tokio::test]
async fn a_listener_warms_until_its_jwks_start_up_fetch_is_done() {
    use jwt_support::{ISS, Key, jwks, jwks_server};
    tokio::time::timeout(Duration::from_secs(60), async {
        let key = Key::rsa("k");
        let (jwks_addr, state) = jwks_server(jwks(&[&key])).await;
        state.set_open(false);
        let listener = listener_from_json(serde_json::json!({
            "name": "authed",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
            "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "authed",
                    "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
                        {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok"}}}
                    ]}]},
                    "http_filters": [
                        {"name": "envoy.filters.http.jwt_authn", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
                            "providers": {"remote": {"issuer": ISS, "remote_jwks": {
                                "http_uri": {"uri": "http://jwks.test/keys", "cluster": "jwks", "timeout": "5s"},
                                "async_fetch": {}
                            }}},
                            "rules": [{"match": {"prefix": "/"}, "requires": {"provider_name": "remote"}}]
                        }},
                        {"name": "envoy.filters.http.router", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                        }}
                    ]
                }
            }]}]
        }));
        let cp = ControlPlane::start(Resources::new()).await;
        cp.set(Listener::type_url(), "authed", listener);
        let bootstrap = format!(
            "{}  - name: jwks\n    connect_timeout: 1s\n    load_assignment:\n      cluster_name: jwks\n      endpoints:\n      - lb_endpoints:\n        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {}}}}}}}\n",
            lds_only_bootstrap(cp.addr, "GRPC"),
            jwks_addr.port()
        );
        let c = start(&bootstrap).await;
        // The fetch starts when the listener arrives; the listener warms meanwhile.
        state.arrived.notified().await;
        assert_eq!(listed(&c.admin, "authed").await, None);
        assert_eq!(
            stat_of(&c.admin, "listener_manager.total_listeners_warming").await,
            1
        );
        // `/ready` waits for the listeners the initial resources brought.
        assert_eq!(ready_status(&c.admin).await, 503);
        state.set_open(true);
        let addr = port_of(&c.admin, "authed").await;
        for _ in 0..100 {
            if ready_status(&c.admin).await == 200 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(ready_status(&c.admin).await, 200);
        let token = key.token("a");
        let r = H1::connect(addr)
            .await
            .get("/", &[("authorization", &format!("Bearer {token}"))])
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, "ok");
        // The request found the keys at hand.
        assert_eq!(state.fetches(), 1);
        assert_eq!(H1::connect(addr).await.get("/", &[]).await.status, 401);
    })
    .await
    .expect("in time");
}

/// One LDS scenario against one proxy: what it answered and served at each step.
async fn lds_scenario(bin: &str, args: &[&str]) -> Vec<String> {
    let lds_url = Listener::type_url();
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(lds_url.clone(), "edge", any(&inline_listener("edge", "v1")));
    let p = start_bin(bin, args, &lds_only_bootstrap(cp.addr, "GRPC")).await;
    let edge = port_of(&p.admin, "edge").await;
    until(edge, |r| r.body == "v1").await;
    let mut seen = Vec::new();
    // A bad version of `edge` beside a new valid listener, in one response.
    cp.state.send_modify(|(v, r)| {
        *v += 1;
        let mut next = Resources::clone(r);
        let l = next.entry(lds_url.clone()).or_default();
        l.insert("edge".into(), any(&bad_listener("edge")));
        l.insert("other".into(), any(&inline_listener("other", "other-v1")));
        *r = Arc::new(next);
    });
    let mut verdict = lds_verdict(&mut cp).await;
    for _ in 0..20 {
        if verdict != "ack" {
            break;
        }
        verdict = lds_verdict(&mut cp).await;
    }
    // The detail's wording differs (Envoy: "Error adding/updating listener(s)
    // edge: ..."); both name the bad listener only.
    seen.push(if verdict.contains("edge") && !verdict.contains("other") {
        "nack edge".to_string()
    } else {
        verdict
    });
    let other = port_of(&p.admin, "other").await;
    seen.push(until(other, |r| r.status == 200).await.body);
    seen.push(H1::connect(edge).await.get("/", &[]).await.body);
    // A valid update of `edge`, then `other` removed.
    cp.set(lds_url.clone(), "edge", any(&inline_listener("edge", "v2")));
    seen.push(until(edge, |r| r.body == "v2").await.body);
    cp.remove(&lds_url, "other");
    until_refused(other).await;
    seen.push(format!(
        "other listed: {}",
        listed(&p.admin, "other").await.is_some()
    ));
    seen.push(H1::connect(edge).await.get("/", &[]).await.body);
    seen
}

#[tokio::test]
async fn envoy_and_courier_agree_on_lds() {
    let Some(envoy) = envoy() else { return };
    tokio::time::timeout(Duration::from_secs(90), async {
        let courier = lds_scenario(
            env!("CARGO_BIN_EXE_courier"),
            &["--concurrency", "1", "--drain-time-s", "1"],
        )
        .await;
        let envoy = lds_scenario(
            &envoy,
            &[
                "--concurrency",
                "1",
                "--drain-time-s",
                "1",
                "--use-dynamic-base-id",
            ],
        )
        .await;
        assert_eq!(courier, envoy);
        assert_eq!(
            courier,
            [
                "nack edge",
                "other-v1",
                "v1",
                "v2",
                "other listed: false",
                "v2"
            ]
        );
    })
    .await
    .expect("in time");
}

/// One in-place filter chain update scenario against one proxy: whether an
/// open plaintext connection's next response closes it after an update of
/// another chain, then after an update of its own chain.
async fn chains_scenario(bin: &str, args: &[&str]) -> Vec<String> {
    let lds_url = Listener::type_url();
    let cp = ControlPlane::start(Resources::new()).await;
    cp.set(
        lds_url.clone(),
        "chains",
        two_chain_listener("sni-v1", "plain-v1"),
    );
    let p = start_bin(bin, args, &lds_only_bootstrap(cp.addr, "GRPC")).await;
    let addr = port_of(&p.admin, "chains").await;
    until(addr, |r| r.body == "plain-v1").await;
    let mut open = H1::connect(addr).await;
    let mut seen = Vec::new();
    let get = async |open: &mut H1| {
        let r = open.get("/", &[]).await;
        format!("{} connection={:?}", r.body, r.header("connection"))
    };
    seen.push(get(&mut open).await);
    cp.set(
        lds_url.clone(),
        "chains",
        two_chain_listener("sni-v2", "plain-v1"),
    );
    // The update is in force once admin's config dump shows it.
    for _ in 0..250 {
        if get_text(&p.admin, "/config_dump").await.contains("sni-v2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        get_text(&p.admin, "/config_dump").await.contains("sni-v2"),
        "{bin}"
    );
    seen.push(get(&mut open).await);
    seen.push(get(&mut open).await);
    cp.set(
        lds_url.clone(),
        "chains",
        two_chain_listener("sni-v2", "plain-v3"),
    );
    until(addr, |r| r.body == "plain-v3").await;
    // Envoy starts draining the old chain's connections once its workers run
    // the new listener, a little after new connections see it: the open
    // connection's responses are read until one closes it (bounded).
    let mut last = String::new();
    for _ in 0..50 {
        last = get(&mut open).await;
        if last.ends_with("Some(\"close\")") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.push(last);
    for stat in ["listener_modified", "listener_in_place_updated"] {
        let name = format!("listener_manager.{stat}");
        seen.push(format!("{name}: {}", stat_of(&p.admin, &name).await));
    }
    seen
}

#[tokio::test]
async fn envoy_and_courier_agree_on_in_place_filter_chain_updates() {
    let Some(envoy) = envoy() else { return };
    tokio::time::timeout(Duration::from_secs(90), async {
        let courier = chains_scenario(
            env!("CARGO_BIN_EXE_courier"),
            &["--concurrency", "1", "--drain-time-s", "1"],
        )
        .await;
        // Envoy's default drain strategy closes connections gradually over
        // the drain time; courier's listener drain is immediate.
        let envoy = chains_scenario(
            &envoy,
            &[
                "--concurrency",
                "1",
                "--drain-time-s",
                "1",
                "--drain-strategy",
                "immediate",
                "--use-dynamic-base-id",
            ],
        )
        .await;
        assert_eq!(courier, envoy);
        assert_eq!(
            courier,
            [
                "plain-v1 connection=None",
                "plain-v1 connection=None",
                "plain-v1 connection=None",
                "plain-v1 connection=Some(\"close\")",
                "listener_manager.listener_modified: 2",
                "listener_manager.listener_in_place_updated: 2",
            ]
        );
    })
    .await
    .expect("in time");
}

/// Boot from LDS with an RDS listener: what `/ready`, `/listeners` and traffic
/// show while the listener warms and once its routes arrive.
async fn warming_scenario(bin: &str, args: &[&str]) -> Vec<String> {
    let (lds_url, rds_url) = (
        Listener::type_url(),
        envoy_types::pb::envoy::config::route::v3::RouteConfiguration::type_url(),
    );
    let mut cp = ControlPlane::start(Resources::new()).await;
    cp.set(lds_url, "ingress", any(&rds_listener("ingress", "routes")));
    let p = start_bin(bin, args, &lds_only_bootstrap(cp.addr, "GRPC")).await;
    cp.saw("RouteConfiguration").await;
    // Envoy lists a listener warming during server init in `/listeners`
    // (courier lists listeners in force only): not compared.
    let mut seen = vec![format!("ready {}", ready_status(&p.admin).await)];
    cp.set(rds_url, "routes", any(&routes(direct("r1"))));
    let addr = port_of(&p.admin, "ingress").await;
    seen.push(until(addr, |r| r.status == 200).await.body);
    for _ in 0..100 {
        if ready_status(&p.admin).await == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.push(format!("ready {}", ready_status(&p.admin).await));
    seen
}

#[tokio::test]
async fn envoy_and_courier_agree_on_warming_at_boot() {
    let Some(envoy) = envoy() else { return };
    tokio::time::timeout(Duration::from_secs(90), async {
        let courier = warming_scenario(
            env!("CARGO_BIN_EXE_courier"),
            &["--concurrency", "1", "--drain-time-s", "1"],
        )
        .await;
        let envoy = warming_scenario(
            &envoy,
            &[
                "--concurrency",
                "1",
                "--drain-time-s",
                "1",
                "--use-dynamic-base-id",
            ],
        )
        .await;
        assert_eq!(courier, envoy);
        assert_eq!(courier, ["ready 503", "r1", "ready 200"]);
    })
    .await
    .expect("in time");
}
