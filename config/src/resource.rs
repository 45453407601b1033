//! xDS resources: one entry point that turns an `Any` (from a gRPC stream, a REST
//! poll or a `path_config_source` file) into a validated resource.

use crate::bootstrap::Bootstrap;
use crate::cluster::{self, Cluster, LoadAssignment};
use crate::config_source::ConfigSourceKind;
use crate::ctx::Ctx;
use crate::error::ConfigError;
use crate::listener::{self, Listener};
use crate::load;
use crate::path::Path;
use crate::route::{self, RouteConfig};
use crate::support;
use envoy_types::pb::envoy::config::cluster::v3::Cluster as ClusterProto;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment as ClaProto;
use envoy_types::pb::envoy::config::listener::v3::Listener as ListenerProto;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration as RouteProto;
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::Secret as SecretProto;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::envoy::service::runtime::v3::Runtime as RuntimeProto;
use envoy_types::pb::google::protobuf::Any;
use prost::Name;

/// A validated xDS resource.
#[derive(Debug, Clone)]
pub enum Resource {
    /// LDS (boxed, as RDS: the store holds one `Resource` per cluster and
    /// per assignment, and these two would make every one ≈ 200 bytes).
    Listener(Box<Listener>),
    /// RDS.
    RouteConfig(Box<RouteConfig>),
    /// CDS (shared: the running cluster keeps the store's translation).
    Cluster(std::sync::Arc<Cluster>),
    /// EDS.
    LoadAssignment(LoadAssignment),
    /// RTDS: one runtime layer's values.
    Runtime(crate::runtime::RtdsValues),
    /// SDS: a certificate or a validation context.
    Secret(std::sync::Arc<crate::tls::sds::SecretResource>),
}

impl Resource {
    /// The resource's name (listener, route config, cluster, or CLA cluster name).
    pub fn name(&self) -> &str {
        match self {
            Resource::Listener(l) => &l.name,
            Resource::RouteConfig(r) => &r.name,
            Resource::Cluster(c) => &c.name,
            Resource::LoadAssignment(a) => &a.cluster_name,
            Resource::Runtime(r) => &r.name,
            Resource::Secret(s) => &s.name,
        }
    }
}

/// Decodes and validates one resource. `ctx` may carry the known cluster set.
pub fn translate(any: &Any, ctx: &mut Ctx) -> Option<Resource> {
    let root = Path::ROOT;
    let url = any.type_url.as_str();
    if url == ListenerProto::type_url() {
        let m = decode::<ListenerProto>(any, ctx)?;
        listener::translate(&m, &root, ctx).map(|l| Resource::Listener(Box::new(l)))
    } else if url == RouteProto::type_url() {
        let m = decode::<RouteProto>(any, ctx)?;
        route::translate(&m, &root, ctx).map(|r| Resource::RouteConfig(Box::new(r)))
    } else if url == ClusterProto::type_url() {
        let m = decode::<ClusterProto>(any, ctx)?;
        cluster::translate(&m, &root, ctx).map(|c| Resource::Cluster(std::sync::Arc::new(c)))
    } else if url == ClaProto::type_url() {
        let m = decode::<ClaProto>(any, ctx)?;
        cluster::load_assignment(&m, &root, ctx).map(Resource::LoadAssignment)
    } else if url == RuntimeProto::type_url() {
        let m = decode::<RuntimeProto>(any, ctx)?;
        crate::runtime::rtds_resource(&m, &root, ctx).map(Resource::Runtime)
    } else if url == SecretProto::type_url() {
        let m = decode::<SecretProto>(any, ctx)?;
        crate::tls::sds::secret_resource(&m, &root, ctx)
            .map(|s| Resource::Secret(std::sync::Arc::new(s)))
    } else {
        ctx.unsupported(&root, format!("resource type {url}"));
        None
    }
}

fn decode<M: prost::Message + Name + Default>(any: &Any, ctx: &mut Ctx) -> Option<M> {
    let m = match M::decode(any.value.as_slice()) {
        Ok(m) => m,
        Err(e) => {
            ctx.error(&Path::ROOT, format!("cannot decode {}: {e}", any.type_url));
            return None;
        }
    };
    match load::dynamic_from_typed(&m) {
        Ok(d) => support::check(&d, &Path::ROOT, ctx),
        Err(e) => ctx.extend(&Path::ROOT, e),
    }
    Some(m)
}

/// Reads a `path_config_source` file: a `DiscoveryResponse` in YAML or JSON.
pub fn read_path_source(path: &std::path::Path) -> Result<DiscoveryResponse, ConfigError> {
    let dynamic = load::dynamic_from_file(path, &DiscoveryResponse::full_name())?;
    load::typed_from_dynamic(&dynamic)
}

/// How deep `path_config_source` files may refer to further files (an LDS file's
/// listener naming an RDS file, ...); deeper references are not followed.
const MAX_SOURCE_DEPTH: usize = 4;

/// Validates the resources inside every `path_config_source` file the bootstrap
/// names — LDS, CDS, and the RDS and EDS files that listeners and clusters name —
/// (Envoy only reads them at run time; courier checks them up front).
pub fn check_path_sources(bootstrap: &Bootstrap, ctx: &mut Ctx) {
    let root = Path::ROOT;
    let sr = root.field("static_resources");
    let lp = sr.field("listeners");
    for (i, l) in bootstrap.listeners.iter().enumerate() {
        listener_sources(l, &lp.index(i), 0, ctx);
    }
    let cp = sr.field("clusters");
    for (i, c) in bootstrap.clusters.iter().enumerate() {
        cluster_sources(c, &cp.index(i), 0, ctx);
    }
    let Some(dynamic) = &bootstrap.dynamic_resources else {
        return;
    };
    let dr = root.field("dynamic_resources");
    for (name, source, type_url) in [
        ("lds_config", &dynamic.lds_config, ListenerProto::type_url()),
        ("cds_config", &dynamic.cds_config, ClusterProto::type_url()),
    ] {
        let Some(source) = source else { continue };
        let ConfigSourceKind::Path { path, .. } = &source.kind else {
            continue;
        };
        let source_path = dr.field(name);
        check_path_source(
            path,
            &type_url,
            &source_path.field("path_config_source.path"),
            0,
            ctx,
        );
    }
}

fn listener_sources(l: &Listener, path: &Path<'_>, depth: usize, ctx: &mut Ctx) {
    for source in l.rds_path_sources() {
        check_path_source(
            source.file,
            &RouteProto::type_url(),
            &path.field(&source.field),
            depth,
            ctx,
        );
    }
}

fn cluster_sources(c: &Cluster, path: &Path<'_>, depth: usize, ctx: &mut Ctx) {
    if let cluster::Discovery::Eds { config, .. } = &c.discovery
        && let ConfigSourceKind::Path { path: file, .. } = &config.kind
    {
        let field = path.field("eds_cluster_config.eds_config.path_config_source.path");
        check_path_source(file, &ClaProto::type_url(), &field, depth, ctx);
    }
}

/// Validates the resources in one `path_config_source` file, which must all be of
/// type `type_url`; errors are reported at `field` (the `path` naming the file),
/// with the file and the resource's own path in the message.
pub fn check_path_source(
    file: &str,
    type_url: &str,
    field: &Path<'_>,
    depth: usize,
    ctx: &mut Ctx,
) {
    let response = match read_path_source(std::path::Path::new(file)) {
        Ok(r) => r,
        Err(e) => {
            for err in e.errors {
                let at = if err.path.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", err.path)
                };
                ctx.error(field, format!("in {file}{at}: {}", err.message));
            }
            return;
        }
    };
    for (i, any) in response.resources.iter().enumerate() {
        if any.type_url != type_url {
            ctx.error(
                field,
                format!(
                    "in {file}: resources[{i}] is {}, expected {type_url}",
                    any.type_url
                ),
            );
            continue;
        }
        let mut inner = Ctx::new();
        // Loaded after the runtime, so with its RE2 program-size thresholds.
        inner.set_re2_limits(ctx.re2_limits());
        let resource = translate(any, &mut inner);
        if let Err(e) = inner.finish(()) {
            for err in e.errors {
                let at = if err.path.is_empty() {
                    String::new()
                } else {
                    format!(".{}", err.path)
                };
                ctx.error(
                    field,
                    format!("in {file}: resources[{i}]{at}: {}", err.message),
                );
            }
            continue;
        }
        if depth + 1 >= MAX_SOURCE_DEPTH {
            continue;
        }
        match &resource {
            Some(Resource::Listener(l)) => listener_sources(l, field, depth + 1, ctx),
            Some(Resource::Cluster(c)) => cluster_sources(c, field, depth + 1, ctx),
            _ => {}
        }
    }
}
