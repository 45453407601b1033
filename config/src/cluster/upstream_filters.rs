//! A cluster's upstream HTTP filters (`HttpProtocolOptions.http_filters`):
//! filters run per upstream attempt, ended by the upstream codec filter.

use crate::core;
use crate::ctx::Ctx;
use crate::extensions;
use crate::filters::admission_control::{self, AdmissionControl};
use crate::filters::credential_injector::{self, CredentialInjector};
use crate::path::Path;
use envoy_types::pb::envoy::extensions::filters::http::admission_control::v3 as ac_pb;
use envoy_types::pb::envoy::extensions::filters::http::credential_injector::v3 as ci_pb;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3 as hcm;
use std::sync::Arc;

/// One upstream HTTP filter (the terminal codec filter is implied: courier's
/// connection pool is the codec).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamFilter {
    /// `name` (its stats are under the cluster's, not by name).
    pub name: String,
    /// The filter's config.
    pub config: UpstreamFilterConfig,
}

/// The upstream filters courier implements.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamFilterConfig {
    /// `envoy.filters.http.credential_injector`.
    CredentialInjector(Arc<CredentialInjector>),
    /// `envoy.filters.http.admission_control`.
    AdmissionControl(Arc<AdmissionControl>),
}

/// The most upstream filters a cluster may have (besides the codec).
pub const MAX_FILTERS: usize = 64;

/// Envoy's error when the chain does not end with the codec filter.
const NO_CODEC: &str = "The codec filter is the only valid terminal upstream HTTP filter, use 'envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec'";

/// Translates `http_filters` (at `path`); the codec filter that must end the
/// list is checked and left out.
pub(super) fn translate(
    list: &[hcm::HttpFilter],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<UpstreamFilter> {
    use hcm::http_filter::ConfigType;
    let mut out = Vec::new();
    if list.is_empty() {
        return out;
    }
    let last = list.len() - 1;
    // An attempt keeps one bit per filter (no allocation per request).
    if last > MAX_FILTERS {
        ctx.unsupported(
            path,
            format!("more than {MAX_FILTERS} upstream HTTP filters"),
        );
        return out;
    }
    for (i, f) in list.iter().enumerate() {
        let p = path.index(i);
        if f.name.is_empty() {
            ctx.error(&p.field("name"), "must not be empty");
            continue;
        }
        if f.disabled {
            ctx.unsupported(&p.field("disabled"), "disabled on an upstream HTTP filter");
            continue;
        }
        let any = match &f.config_type {
            Some(ConfigType::TypedConfig(any)) => any,
            // Refused by the support table (ECDS).
            Some(ConfigType::ConfigDiscovery(_)) => continue,
            None => {
                ctx.unsupported(&p, format!("upstream HTTP filter {}", f.name));
                continue;
            }
        };
        let tp = p.field("typed_config");
        let url = any.type_url.as_str();
        if url == extensions::UPSTREAM_CODEC {
            if i != last {
                // Envoy's wording.
                ctx.error(
                    &p,
                    format!(
                        "Error: terminal filter named {} of type envoy.filters.http.upstream_codec must be the last filter in a upstream http filter chain.",
                        f.name
                    ),
                );
            }
            continue;
        }
        if i == last {
            ctx.error(&p, NO_CODEC);
        }
        let config = if url == extensions::CREDENTIAL_INJECTOR {
            core::unpack::<ci_pb::CredentialInjector>(any, &tp, ctx)
                .and_then(|m| credential_injector::translate(&m, &tp, ctx))
                .map(|c| UpstreamFilterConfig::CredentialInjector(Arc::new(c)))
        } else if url == extensions::ADMISSION_CONTROL {
            core::unpack::<ac_pb::AdmissionControl>(any, &tp, ctx)
                .and_then(|m| admission_control::translate(&m, &tp, ctx))
                .map(|c| UpstreamFilterConfig::AdmissionControl(Arc::new(c)))
        } else {
            let name = url.rsplit('/').next().unwrap_or(url);
            ctx.unsupported(&p, format!("upstream HTTP filter {} ({name})", f.name));
            None
        };
        if let Some(config) = config {
            out.push(UpstreamFilter {
                name: f.name.clone(),
                config,
            });
        }
    }
    out
}
