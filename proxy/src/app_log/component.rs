//! Envoy's logger (component) names for courier's log sources: `%n` in a log
//! format, and the names `--component-log-level` takes. Each courier module
//! logs as the Envoy component that owns the same work.

/// Module path prefixes and the Envoy component they log as; the longest
/// matching prefix wins.
const COMPONENTS: &[(&str, &str)] = &[
    ("courier::admin::runtime", "runtime"),
    ("courier::admin", "admin"),
    ("courier::xds", "config"),
    ("courier_xds", "config"),
    ("courier_config::runtime", "runtime"),
    ("courier_config", "config"),
    ("courier::upstream::health_check", "hc"),
    ("courier::upstream::pool", "pool"),
    ("courier::upstream", "upstream"),
    ("courier::router", "router"),
    ("courier::attempt", "router"),
    ("courier::conn_manager", "http"),
    ("courier::codec", "http"),
    ("courier::request", "http"),
    ("courier::accept", "conn_handler"),
    ("courier::l4", "filter"),
    ("courier::tls", "connection"),
    ("courier::maybe_tls", "connection"),
    ("courier::trace", "tracing"),
    ("courier::filter_chain::jwks_fetch", "jwt"),
    ("courier::filter_chain::ext_authz_client", "ext_authz"),
    ("courier::filter_chain", "filter"),
    ("courier_filters::jwt_authn", "jwt"),
    ("courier_filters::ext_authz", "ext_authz"),
    ("courier_filters::rbac", "rbac"),
    ("courier_filters", "filter"),
    ("courier::access_log", "file"),
    ("courier::stats", "stats"),
    ("courier", "main"),
    ("h2", "http2"),
    ("hyper", "http"),
    ("hyper_util", "http"),
    ("rustls", "connection"),
    ("tokio_rustls", "connection"),
    ("tonic", "grpc"),
];

/// Envoy's logger names (`envoy --help`'s component list for
/// `--component-log-level`, Envoy 1.40).
const ENVOY_COMPONENTS: &[&str] = &[
    "admin",
    "alternate_protocols_cache",
    "aws",
    "assert",
    "backtrace",
    "basic_auth",
    "cache_filter",
    "client",
    "config",
    "connection",
    "conn_handler",
    "compression",
    "credential_injector",
    "decompression",
    "dns",
    "dubbo",
    "dynamic_forward_proxy",
    "envoy_bug",
    "ext_authz",
    "ext_proc",
    "file",
    "filter",
    "forward_proxy",
    "geolocation",
    "golang",
    "grpc",
    "happy_eyeballs",
    "hc",
    "health_checker",
    "http",
    "http2",
    "http3",
    "hystrix",
    "init",
    "io",
    "jwt",
    "kafka",
    "key_value_store",
    "lua",
    "main",
    "matcher",
    "misc",
    "mongo",
    "multi_connection",
    "oauth2",
    "pool",
    "quic",
    "quic_stream",
    "rate_limit_quota",
    "rbac",
    "rds",
    "redis",
    "rocketmq",
    "router",
    "runtime",
    "secret",
    "stats",
    "tap",
    "testing",
    "thrift",
    "tracing",
    "udp",
    "upstream",
    "wasm",
    "websocket",
];

/// The component a log line from `target` (its module path) belongs to.
pub fn of(target: &str) -> &'static str {
    COMPONENTS
        .iter()
        .filter(|(prefix, _)| {
            target.starts_with(prefix)
                && matches!(target.as_bytes().get(prefix.len()), None | Some(b':'))
        })
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or("misc", |(_, c)| c)
}

/// The `tracing` filter for base level `base` with some components at their
/// own levels (`--component-log-level`): every courier module at its
/// component's level, so a component's level never leaks into a module of
/// another that happens to sit below it.
pub fn filter(base: &str, levels: &[(String, String)]) -> Result<String, String> {
    for (component, _) in levels {
        if !ENVOY_COMPONENTS.contains(&component.as_str()) {
            return Err(format!("invalid component specified '{component}'"));
        }
    }
    let mut out = base.to_string();
    if levels.is_empty() {
        return Ok(out);
    }
    for (prefix, component) in COMPONENTS {
        // The last mention of a component wins, as Envoy applies them in order.
        let level = levels
            .iter()
            .rev()
            .find(|(c, _)| c == component)
            .map_or(base, |(_, l)| l.as_str());
        out.push_str(&format!(",{prefix}={level}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_names_the_component() {
        assert_eq!(of("courier::upstream::pool::wait"), "pool");
        assert_eq!(of("courier::upstream::health_check"), "hc");
        assert_eq!(of("courier::upstream"), "upstream");
        assert_eq!(of("courier::server"), "main");
        assert_eq!(of("courier_xds::client"), "config");
        // A prefix matches whole path segments only.
        assert_eq!(of("courier_configx"), "misc");
        assert_eq!(of("h2::codec"), "http2");
        assert_eq!(of("mio"), "misc");
    }

    #[test]
    fn component_levels_become_module_directives() {
        let f = filter("info", &[("upstream".into(), "debug".into())]).unwrap();
        assert!(f.starts_with("info,"));
        assert!(f.contains(",courier::upstream=debug,"));
        // The pool and health checker are components of their own.
        assert!(f.contains(",courier::upstream::pool=info,"));
        assert!(f.contains(",courier::upstream::health_check=info,"));
        assert_eq!(filter("warn", &[]).unwrap(), "warn");
        // An Envoy component courier has no module for is valid.
        assert!(filter("info", &[("lua".into(), "debug".into())]).is_ok());
        assert_eq!(
            filter("info", &[("bogus".into(), "debug".into())]).unwrap_err(),
            "invalid component specified 'bogus'"
        );
    }
}
