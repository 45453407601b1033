//! What this build of the data plane serves. The config crate validates the whole
//! v3 surface courier supports; the data plane grows into it issue by issue. Until
//! a feature is served, `--mode serve` refuses a config that uses it (with the
//! path), rather than run it without the behaviour the config asks for — a JWT
//! filter that is not enforced, say. `--mode validate` is unaffected.

use courier_config::Bootstrap;
use courier_config::cluster::{Cluster, Discovery, UpstreamProtocol};
use courier_config::config_source::{ConfigSource, ConfigSourceKind};
use courier_config::format::{FormatString, Part};
use courier_config::listener::Listener;
use courier_config::listener::hcm::{HttpConnectionManager, RouteSpecifier};
use courier_config::route::{Action, HeaderMutations, RouteConfig};

/// Every feature in `bootstrap` that the data plane does not serve yet.
pub fn check(bootstrap: &Bootstrap) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if let Some(d) = &bootstrap.dynamic_resources {
        // ads_config feeds CDS, EDS, RDS and LDS (crate::xds).
        if let Some(lds) = &d.lds_config {
            let mut refuse = |_: &str, what: &str| {
                problems.push(format!(
                    "dynamic_resources.lds_config: {what} is not served yet"
                ));
            };
            config_source(lds, "", &mut refuse);
        }
        if let Some(cds) = &d.cds_config {
            let mut refuse = |_: &str, what: &str| {
                problems.push(format!(
                    "dynamic_resources.cds_config: {what} is not served yet"
                ));
            };
            config_source(cds, "", &mut refuse);
        }
    }
    for (i, c) in bootstrap.clusters.iter().enumerate() {
        cluster(c, &format!("static_resources.clusters[{i}]"), &mut problems);
    }
    // SDS over ADS needs the ADS stream.
    let has_ads = bootstrap
        .dynamic_resources
        .as_ref()
        .is_some_and(|d| d.ads_config.is_some());
    if !has_ads {
        let mut sds_over_ads = |common: &courier_config::tls::CommonTls, at: String| {
            if common.sds.as_ref().is_some_and(|s| {
                s.secrets()
                    .any(|(_, secret)| secret.source.kind == ConfigSourceKind::Ads)
            }) {
                problems.push(format!(
                    "{at}: SDS over ads needs dynamic_resources.ads_config"
                ));
            }
        };
        for (i, c) in bootstrap.clusters.iter().enumerate() {
            let at = format!("static_resources.clusters[{i}]");
            if let Some(t) = &c.tls {
                sds_over_ads(&t.common, format!("{at}.transport_socket"));
            }
            for (j, m) in c.transport_socket_matches.iter().enumerate() {
                if let Some(t) = &m.tls {
                    sds_over_ads(
                        &t.common,
                        format!("{at}.transport_socket_matches[{j}].transport_socket"),
                    );
                }
            }
        }
        for (i, l) in bootstrap.listeners.iter().enumerate() {
            for (j, fc) in l.all_filter_chains().enumerate() {
                if let Some(t) = &fc.tls {
                    sds_over_ads(
                        &t.common,
                        format!(
                            "static_resources.listeners[{i}].filter_chains[{j}].transport_socket"
                        ),
                    );
                }
            }
        }
    }
    for (i, l) in bootstrap.listeners.iter().enumerate() {
        listener(
            l,
            &format!("static_resources.listeners[{i}]"),
            &mut problems,
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

pub(crate) fn cluster(c: &Cluster, at: &str, problems: &mut Vec<String>) {
    let mut refuse = |field: &str, what: &str| {
        problems.push(format!("{at}.{field}: {what} is not served yet"));
    };
    if let Discovery::Eds { config, .. } = &c.discovery {
        config_source(config, "eds_cluster_config.eds_config", &mut refuse);
    }
    // auto_config: ALPN picks HTTP/2 or HTTP/1.1 per connection (upstream::pool).
    // use_downstream_protocol_config: each request's protocol picks its pool
    // (upstream::pool); one TLS context cannot offer both ALPN lists.
    if matches!(c.http.protocol, UpstreamProtocol::UseDownstream)
        && (c.tls.is_some() || c.transport_socket_matches.iter().any(|m| m.tls.is_some()))
    {
        refuse(
            "typed_extension_protocol_options",
            "use_downstream_protocol_config with a TLS transport_socket",
        );
    }
    // Pipe hosts are connected to in plaintext.
    let tls = c.tls.is_some() || c.transport_socket_matches.iter().any(|m| m.tls.is_some());
    if tls
        && c.load_assignment
            .as_ref()
            .is_some_and(|la| la.endpoints().any(|e| e.address.pipe().is_some()))
    {
        refuse("transport_socket", "TLS to a pipe (unix socket) endpoint");
    }
    // `max_requests_per_connection` and `max_connection_duration` are served
    // (crate::upstream::pool).
}

pub(crate) fn listener(l: &Listener, at: &str, problems: &mut Vec<String>) {
    if l.address.pipe().is_some() {
        pipe_listener(l, at, problems);
    }
    // Filter chain matching (server names, transport protocol, ALPN), the
    // default chain and TLS termination are served: every chain's connection
    // manager is checked.
    for fc in l.all_filter_chains() {
        // A TCP proxy chain serves everything its config accepts.
        if let Some(h) = fc.hcm() {
            hcm(h, &format!("{at}.{}", fc.hcm_config_path), problems);
            xfcc_by(fc, h, &format!("{at}.{}", fc.hcm_config_path), problems);
        }
    }
}

/// `APPEND_FORWARD` and `SANITIZE_SET` name our certificate's URI SANs
/// (`By=`): courier takes them from the chain's first certificate, so the
/// modes are served where every certificate the chain may serve names the same.
fn xfcc_by(
    fc: &courier_config::listener::FilterChain,
    h: &courier_config::listener::HttpConnectionManager,
    at: &str,
    problems: &mut Vec<String>,
) {
    use courier_config::listener::hcm::ForwardClientCert as F;
    if !matches!(h.forward_client_cert, F::AppendForward | F::SanitizeSet) {
        return;
    }
    let Some(tls) = &fc.tls else { return };
    let uris = |der: &[u8]| -> Vec<String> {
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let Ok((_, cert)) = X509Certificate::from_der(der) else {
            return Vec::new();
        };
        let Ok(Some(ext)) = cert.subject_alternative_name() else {
            return Vec::new();
        };
        ext.value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::URI(u) => Some((*u).to_string()),
                _ => None,
            })
            .collect()
    };
    let mut sets = tls
        .certificates
        .iter()
        .filter_map(|c| c.certificate_chain.first())
        .map(|leaf| uris(leaf.as_ref()));
    let first = sets.next().unwrap_or_default();
    if tls.common.sds.is_some() || sets.any(|s| s != first) {
        problems.push(format!(
            "{at}.forward_client_cert_details: writing the client certificate's details on a chain whose server certificates (or SDS certificates) may name different URIs is not served yet"
        ));
    }
}

/// A pipe (Unix domain socket) listener serves plaintext chains without match
/// criteria; its connections have no IP address for `rbac` and `ext_authz`
/// to see.
fn pipe_listener(l: &Listener, at: &str, problems: &mut Vec<String>) {
    let mut refuse = |field: &str, what: &str| {
        problems.push(format!(
            "{at}.{field}: {what} on a pipe listener is not served yet"
        ));
    };
    if l.proxy_protocol.is_some() {
        refuse("listener_filters", "the proxy_protocol listener filter");
    }
    let chains = l
        .filter_chains
        .iter()
        .enumerate()
        .map(|(i, fc)| (format!("filter_chains[{i}]"), fc));
    let default = l
        .default_filter_chain
        .as_deref()
        .map(|fc| ("default_filter_chain".to_string(), fc));
    for (path, fc) in chains.chain(default) {
        if fc.tls.is_some() {
            refuse(&format!("{path}.transport_socket"), "TLS");
        }
        if fc.filter_chain_match != Default::default() {
            refuse(
                &format!("{path}.filter_chain_match"),
                "filter chain matching",
            );
        }
        if !fc.network_rbacs.is_empty() {
            refuse(
                &format!("{path}.filters"),
                "the envoy.filters.network.rbac filter (it matches on the peer's IP address)",
            );
        }
        if let Some(h) = fc.hcm() {
            for (k, f) in h.http_filters.iter().enumerate() {
                use courier_config::filters::HttpFilterConfig as F;
                if matches!(f.config, F::Rbac(_) | F::ExtAuthz(_)) {
                    refuse(
                        &format!("{}.http_filters[{k}]", fc.hcm_config_path),
                        &format!("{} (it matches on or sends the peer's IP address)", f.name),
                    );
                }
            }
        }
    }
}

fn hcm(h: &HttpConnectionManager, at: &str, problems: &mut Vec<String>) {
    let mut refuse =
        |field: &str, what: &str| problems.push(format!("{at}.{field}: {what} is not served yet"));
    // Every HTTP filter the config accepts (jwt_authn, rbac, ext_authz, router) is served.
    // Served: path normalisation (crate::conn_manager::sanitize), listener filters
    // (tls_inspector), overload_manager and the runtime keys config/ accepts.
    // `common_http_protocol_options.max_connection_duration` and
    // `max_stream_duration` are served (crate::codec::serve, crate::conn_manager::limits).
    if h.proxy_100_continue {
        refuse("proxy_100_continue", "100-continue proxying");
    }
    match &h.route_specifier {
        RouteSpecifier::Inline(rc) => routes(rc, &format!("{at}.route_config"), problems),
        RouteSpecifier::Rds {
            config_source: cs, ..
        } => {
            config_source(cs, "rds.config_source", &mut |field, what| {
                problems.push(format!("{at}.{field}: {what} is not served yet"));
            });
        }
    }
}

/// The transports crate::xds serves for EDS and RDS: ADS, gRPC, REST, files.
fn config_source(cs: &ConfigSource, field: &str, refuse: &mut dyn FnMut(&str, &str)) {
    match &cs.kind {
        ConfigSourceKind::Ads | ConfigSourceKind::Path { .. } | ConfigSourceKind::Api(_) => {}
        ConfigSourceKind::SelfSource => refuse(field, "a self config source"),
    }
}

/// What the data plane does not serve in a route configuration (also applied to
/// route configurations arriving over RDS, which are rejected for it).
/// What the data plane does not serve in a route configuration (also applied to
/// route configurations arriving over RDS, which are rejected for it).
pub(crate) fn routes(rc: &RouteConfig, at: &str, problems: &mut Vec<String>) {
    mutations(&rc.request_headers, &rc.response_headers, at, problems);
    for (v, vh) in rc.virtual_hosts.iter().enumerate() {
        let at = format!("{at}.virtual_hosts[{v}]");
        mutations(&vh.request_headers, &vh.response_headers, &at, problems);
        for (r, route) in vh.routes.iter().enumerate() {
            let at = format!("{at}.routes[{r}]");
            mutations(
                &route.request_headers,
                &route.response_headers,
                &at,
                problems,
            );
            let Action::Route(ra) = &route.action else {
                continue;
            };
            if let courier_config::route::ClusterSpecifier::Weighted(w) = &ra.cluster {
                for (i, c) in w.clusters.iter().enumerate() {
                    let at = format!("{at}.route.weighted_clusters.clusters[{i}]");
                    mutations(&c.request_headers, &c.response_headers, &at, problems);
                }
            }
        }
    }
}

/// Refuses header values using format commands the router does not evaluate yet.
fn mutations(req: &HeaderMutations, resp: &HeaderMutations, at: &str, problems: &mut Vec<String>) {
    for (side, m) in [("request", req), ("response", resp)] {
        for (i, h) in m.add.iter().enumerate() {
            if let Some(c) = unsupported_command(&h.value) {
                problems.push(format!(
                    "{at}.{side}_headers_to_add[{i}]: the command {c:?} in a header value is not served yet"
                ));
            }
        }
    }
}

fn unsupported_command(f: &FormatString) -> Option<&courier_config::format::Command> {
    f.parts.iter().find_map(|p| match p {
        Part::Command(c) if !crate::router::headers::supported(c) => Some(c),
        _ => None,
    })
}
