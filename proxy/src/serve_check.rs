//! What this build of the data plane serves. The config crate validates the whole
//! v3 surface courier supports; the data plane grows into it issue by issue. Until
//! a feature is served, `--mode serve` refuses a config that uses it (with the
//! path), rather than run it without the behaviour the config asks for — a JWT
//! filter that is not enforced, say. `--mode validate` is unaffected.

use courier_config::Bootstrap;
use courier_config::filters::HttpFilterConfig;
use courier_config::listener::Listener;
use courier_config::listener::hcm::{
    EscapedSlashesAction, HttpConnectionManager, RouteSpecifier, ServerHeaderTransformation,
    StripPort,
};
use courier_config::route::{Action, RouteConfig};

/// Every feature in `bootstrap` that the data plane does not serve yet.
pub fn check(bootstrap: &Bootstrap) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    if bootstrap.dynamic_resources.is_some() {
        problems.push("dynamic_resources: xDS is not served yet".to_string());
    }
    if bootstrap
        .admin
        .as_ref()
        .is_some_and(|a| !a.access_log.is_empty())
    {
        problems.push("admin.access_log: admin access logs are not written yet".to_string());
    }
    for (i, c) in bootstrap.clusters.iter().enumerate() {
        if !c.health_checks.is_empty() {
            problems.push(format!(
                "static_resources.clusters[{i}].health_checks: active health checks are not run yet"
            ));
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

fn listener(l: &Listener, at: &str, problems: &mut Vec<String>) {
    // Filter chain matching (server names, transport protocol, ALPN), the
    // default chain and TLS termination are served: every chain's connection
    // manager is checked.
    for fc in l.all_filter_chains() {
        hcm(
            &fc.http_connection_manager,
            &format!("{at}.{}", fc.hcm_config_path),
            problems,
        );
    }
}

fn hcm(h: &HttpConnectionManager, at: &str, problems: &mut Vec<String>) {
    let mut refuse =
        |field: &str, what: &str| problems.push(format!("{at}.{field}: {what} is not served yet"));
    for (i, f) in h.http_filters.iter().enumerate() {
        if !matches!(f.config, HttpFilterConfig::Router(_)) {
            refuse(
                &format!("http_filters[{i}]"),
                &format!("HTTP filter {}", f.name),
            );
        }
    }
    if !h.access_log.is_empty() {
        refuse("access_log", "access logging");
    }
    if h.use_remote_address || h.xff_num_trusted_hops != 0 || h.skip_xff_append {
        refuse("use_remote_address", "x-forwarded-for handling");
    }
    if h.normalize_path
        || h.merge_slashes
        || h.path_with_escaped_slashes_action != EscapedSlashesAction::KeepUnchanged
    {
        refuse("normalize_path", "path normalisation");
    }
    if h.strip_port != StripPort::None {
        refuse("strip_matching_host_port", "host port stripping");
    }
    if !h.upgrade_configs.is_empty() {
        refuse("upgrade_configs", "protocol upgrades");
    }
    if h.request_timeout.is_some() || h.request_headers_timeout.is_some() {
        refuse("request_timeout", "request timeouts");
    }
    if h.proxy_100_continue {
        refuse("proxy_100_continue", "100-continue proxying");
    }
    if h.max_request_headers_kb != courier_config::listener::hcm::DEFAULT_MAX_REQUEST_HEADERS_KB {
        refuse(
            "max_request_headers_kb",
            "a header size limit other than 60 KiB",
        );
    }
    if h.always_set_request_id_in_response {
        refuse("always_set_request_id_in_response", "request ids");
    }
    if h.server_header_transformation != ServerHeaderTransformation::Overwrite {
        refuse(
            "server_header_transformation",
            "server header transformation",
        );
    }
    match &h.route_specifier {
        RouteSpecifier::Inline(rc) => routes(rc, &format!("{at}.route_config"), problems),
        RouteSpecifier::Rds { .. } => problems.push(format!("{at}.rds: RDS is not served yet")),
    }
}

fn routes(rc: &RouteConfig, at: &str, problems: &mut Vec<String>) {
    if !rc.request_headers.is_empty()
        || !rc.response_headers.is_empty()
        || !rc.typed_per_filter_config.is_empty()
    {
        problems.push(format!("{at}: header mutations are not served yet"));
    }
    for (v, vh) in rc.virtual_hosts.iter().enumerate() {
        let at = format!("{at}.virtual_hosts[{v}]");
        if !vh.request_headers.is_empty()
            || !vh.response_headers.is_empty()
            || !vh.typed_per_filter_config.is_empty()
        {
            problems.push(format!(
                "{at}: header mutations and per-filter configs are not served yet"
            ));
        }
        for (r, route) in vh.routes.iter().enumerate() {
            let at = format!("{at}.routes[{r}]");
            if matches!(route.action, Action::Route(_)) {
                problems.push(format!(
                    "{at}.route: forwarding to upstream clusters is not served yet"
                ));
            }
            if !route.request_headers.is_empty()
                || !route.response_headers.is_empty()
                || !route.typed_per_filter_config.is_empty()
            {
                problems.push(format!(
                    "{at}: header mutations and per-filter configs are not served yet"
                ));
            }
        }
    }
}
