//! Builds the descriptor pool courier reads Envoy configs with.
//!
//! `envoy-types` generates its Rust types from Envoy's protos and ships the
//! matching `FileDescriptorSet`, but does not export it. Rather than commit a
//! copy of that third-party file, this script finds the exact `envoy-types`
//! package cargo resolved (through `cargo metadata`, so vendored and
//! non-default registries work too), strips the source comments (halving the
//! size and the decode time) and writes the set into `OUT_DIR`.
//! `COURIER_ENVOY_DESCRIPTORS` may name the file instead.
//!
//! The set is pruned to the files the messages courier reads can reach (the
//! bootstrap, the xDS resources and discovery messages, and the extension types
//! courier implements): decoded, the whole set costs about 17 MB of memory for
//! the life of the process, the pruned one about 7. Every other message keeps a
//! field-less stand-in of the same name, so an `Any` naming it still resolves
//! and is refused by type, as before. (A unit test checks that every message
//! in courier's support tables is kept whole.)

use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;

/// The messages courier reads; the pruned set is what they reach.
const ROOTS: &[&str] = &[
    "envoy.config.bootstrap.v3.Bootstrap",
    "envoy.config.listener.v3.Listener",
    "envoy.config.route.v3.RouteConfiguration",
    "envoy.config.cluster.v3.Cluster",
    "envoy.config.endpoint.v3.ClusterLoadAssignment",
    "envoy.service.runtime.v3.Runtime",
    "envoy.service.discovery.v3.DiscoveryRequest",
    "envoy.service.discovery.v3.DiscoveryResponse",
    "envoy.service.discovery.v3.DeltaDiscoveryRequest",
    "envoy.service.discovery.v3.DeltaDiscoveryResponse",
    // Extensions (typed_config types) courier implements.
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    "envoy.extensions.filters.udp.udp_proxy.v3.UdpProxyConfig",
    "envoy.extensions.filters.udp.udp_proxy.v3.Route",
    "envoy.extensions.filters.http.router.v3.Router",
    "envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
    "envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig",
    "envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
    "envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
    "envoy.extensions.filters.http.rbac.v3.RBAC",
    "envoy.extensions.filters.http.rbac.v3.RBACPerRoute",
    "envoy.extensions.filters.http.compressor.v3.Compressor",
    "envoy.extensions.filters.http.compressor.v3.CompressorPerRoute",
    "envoy.extensions.filters.http.csrf.v3.CsrfPolicy",
    "envoy.extensions.filters.http.buffer.v3.Buffer",
    "envoy.extensions.filters.http.buffer.v3.BufferPerRoute",
    "envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
    "envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation",
    "envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
    "envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute",
    "envoy.extensions.filters.http.oauth2.v3.OAuth2",
    "envoy.extensions.filters.http.oauth2.v3.OAuth2PerRoute",
    "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth",
    "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute",
    "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
    "envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
    "envoy.extensions.filters.http.health_check.v3.HealthCheck",
    "envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol",
    "envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit",
    "envoy.extensions.filters.network.rbac.v3.RBAC",
    "envoy.extensions.filters.http.fault.v3.HTTPFault",
    "envoy.extensions.filters.http.grpc_web.v3.GrpcWeb",
    "envoy.extensions.filters.http.grpc_stats.v3.FilterConfig",
    "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
    "envoy.extensions.filters.http.ratelimit.v3.RateLimit",
    "envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute",
    "envoy.extensions.compression.gzip.compressor.v3.Gzip",
    "envoy.extensions.compression.brotli.compressor.v3.Brotli",
    "envoy.extensions.compression.zstd.compressor.v3.Zstd",
    // The RBAC unified matcher's inputs and input matchers.
    "envoy.extensions.matching.common_inputs.network.v3.SourceIPInput",
    "envoy.type.matcher.v3.HttpRequestHeaderMatchInput",
    "envoy.extensions.matching.input_matchers.ip.v3.Ip",
    "envoy.extensions.matching.input_matchers.metadata.v3.Metadata",
    "envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector",
    "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
    "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
    "envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer",
    "envoy.extensions.transport_sockets.proxy_protocol.v3.ProxyProtocolUpstreamTransport",
    "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    "envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec",
    "envoy.extensions.filters.http.credential_injector.v3.CredentialInjector",
    "envoy.extensions.http.injected_credentials.generic.v3.Generic",
    "envoy.extensions.filters.http.admission_control.v3.AdmissionControl",
    "envoy.extensions.access_loggers.file.v3.FileAccessLog",
    "envoy.extensions.health_check.event_sinks.file.v3.HealthCheckEventFileSink",
    "envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
    "envoy.extensions.access_loggers.stream.v3.StderrAccessLog",
    "envoy.extensions.access_loggers.open_telemetry.v3.OpenTelemetryAccessLogConfig",
    "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig",
    "envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin",
    "envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest",
    "envoy.extensions.load_balancing_policies.random.v3.Random",
    "envoy.extensions.load_balancing_policies.ring_hash.v3.RingHash",
    "envoy.extensions.load_balancing_policies.maglev.v3.Maglev",
    "envoy.extensions.clusters.dns.v3.DnsCluster",
    "envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
    "envoy.extensions.load_balancing_policies.cluster_provided.v3.ClusterProvided",
    "envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig",
    "envoy.extensions.filters.http.dynamic_forward_proxy.v3.PerRouteConfig",
    "envoy.extensions.filters.network.sni_dynamic_forward_proxy.v3.FilterConfig",
    "envoy.extensions.bootstrap.internal_listener.v3.InternalListener",
    "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate",
    "envoy.extensions.retry.priority.previous_priorities.v3.PreviousPrioritiesConfig",
    "envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
    "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
    "envoy.extensions.regex_engines.v3.GoogleRE2",
    "envoy.extensions.http.header_formatters.preserve_case.v3.PreserveCaseFormatterConfig",
    "envoy.extensions.http.original_ip_detection.xff.v3.XffConfig",
    "envoy.extensions.http.original_ip_detection.custom_header.v3.CustomHeaderConfig",
    "envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter",
    "envoy.extensions.filters.http.custom_response.v3.CustomResponse",
    "envoy.extensions.http.custom_response.local_response_policy.v3.LocalResponsePolicy",
    "envoy.type.matcher.v3.HttpResponseStatusCodeMatchInput",
    "envoy.type.matcher.v3.HttpResponseStatusCodeClassMatchInput",
    "envoy.type.matcher.v3.HttpResponseLocalReplyMatchInput",
    "envoy.type.matcher.v3.HttpResponseHeaderMatchInput",
    "xds.type.matcher.v3.CelMatcher",
    "xds.type.matcher.v3.HttpAttributesCelMatchInput",
    "envoy.config.trace.v3.OpenTelemetryConfig",
    "envoy.config.trace.v3.ZipkinConfig",
    "envoy.config.trace.v3.DatadogConfig",
    "envoy.config.metrics.v3.StatsdSink",
    "envoy.config.metrics.v3.MetricsServiceConfig",
    "envoy.extensions.stat_sinks.open_telemetry.v3.SinkConfig",
    "envoy.extensions.tracers.opentelemetry.samplers.v3.ParentBasedSamplerConfig",
    "envoy.extensions.tracers.opentelemetry.samplers.v3.TraceIdRatioBasedSamplerConfig",
    "envoy.extensions.tracers.opentelemetry.resource_detectors.v3.StaticConfigResourceDetectorConfig",
    // Well-known types an `Any` may carry.
    "google.protobuf.Empty",
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.Duration",
    "google.protobuf.Timestamp",
    "google.protobuf.FieldMask",
    "google.protobuf.Any",
    "google.protobuf.BoolValue",
    "google.protobuf.BytesValue",
    "google.protobuf.DoubleValue",
    "google.protobuf.FloatValue",
    "google.protobuf.Int32Value",
    "google.protobuf.Int64Value",
    "google.protobuf.StringValue",
    "google.protobuf.UInt32Value",
    "google.protobuf.UInt64Value",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=COURIER_ENVOY_DESCRIPTORS");
    println!("cargo:rerun-if-changed=build.rs");
    let source = match std::env::var_os("COURIER_ENVOY_DESCRIPTORS") {
        Some(path) => PathBuf::from(path),
        None => find_envoy_types()
            .or_else(|e| find_in_cargo_home().ok_or(e))?
            .join("src/generated/types.bin"),
    };
    let raw = std::fs::read(&source)
        .map_err(|e| format!("reading Envoy descriptors {}: {e}", source.display()))?;
    let mut set = FileDescriptorSet::decode(raw.as_slice())?;
    for file in &mut set.file {
        file.source_code_info = None;
    }
    add_cel_matcher(&mut set);
    let set = prune(set)?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("envoy_descriptors.bin");
    std::fs::write(out, set.encode_to_vec())?;
    Ok(())
}

/// Adds cncf/xds's CEL matcher messages (`xds/type/matcher/v3/cel.proto`,
/// `http_inputs.proto`), which `envoy-types` does not carry, unless a newer
/// set does: their shape is two fields and an empty message, written here as
/// the proto declares them.
fn add_cel_matcher(set: &mut FileDescriptorSet) {
    use prost_types::{
        FieldDescriptorProto, field_descriptor_proto::Label, field_descriptor_proto::Type,
    };
    let have = set.file.iter().any(|f| {
        f.package() == "xds.type.matcher.v3"
            && f.message_type.iter().any(|m| m.name() == "CelMatcher")
    });
    if have {
        return;
    }
    let field = |name: &str, json: &str, number: i32, ty: Type, type_name: Option<&str>| {
        FieldDescriptorProto {
            name: Some(name.into()),
            json_name: Some(json.into()),
            number: Some(number),
            label: Some(Label::Optional as i32),
            r#type: Some(ty as i32),
            type_name: type_name.map(str::to_string),
            ..Default::default()
        }
    };
    set.file.push(FileDescriptorProto {
        name: Some("courier/xds/type/matcher/v3/cel.proto".into()),
        package: Some("xds.type.matcher.v3".into()),
        dependency: vec!["xds/type/v3/cel.proto".into()],
        message_type: vec![
            DescriptorProto {
                name: Some("CelMatcher".into()),
                field: vec![
                    field(
                        "expr_match",
                        "exprMatch",
                        1,
                        Type::Message,
                        Some(".xds.type.v3.CelExpression"),
                    ),
                    field("description", "description", 2, Type::String, None),
                ],
                ..Default::default()
            },
            DescriptorProto {
                name: Some("HttpAttributesCelMatchInput".into()),
                ..Default::default()
            },
        ],
        syntax: Some("proto3".into()),
        ..Default::default()
    });
}

/// Keeps the files [`ROOTS`] reach (through message fields and file imports);
/// every message of the other files becomes a field-less stand-in.
fn prune(set: FileDescriptorSet) -> Result<FileDescriptorSet, String> {
    // Message full name -> (its file, its message-typed fields' type names).
    let mut messages: HashMap<String, (usize, Vec<String>)> = HashMap::new();
    fn index(
        file: usize,
        scope: &str,
        list: &[DescriptorProto],
        out: &mut HashMap<String, (usize, Vec<String>)>,
    ) {
        for m in list {
            let name = format!("{scope}.{}", m.name());
            let refs = m
                .field
                .iter()
                .filter_map(|f| f.type_name.as_deref())
                .map(|t| t.trim_start_matches('.').to_string())
                .collect();
            index(file, &name, &m.nested_type, out);
            out.insert(name, (file, refs));
        }
    }
    for (i, f) in set.file.iter().enumerate() {
        index(i, f.package(), &f.message_type, &mut messages);
    }
    let by_file: HashMap<&str, usize> = set
        .file
        .iter()
        .enumerate()
        .map(|(i, f)| (f.name(), i))
        .collect();
    let mut keep: BTreeSet<usize> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut stack: Vec<String> = ROOTS.iter().map(|r| r.to_string()).collect();
    // A well-known type the set does not carry is simply not there to keep.
    for r in ROOTS.iter().filter(|r| r.starts_with("envoy.")) {
        if !messages.contains_key(*r) {
            return Err(format!("root message {r} is not in the Envoy descriptors"));
        }
    }
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        // Enum type names are not in `messages`; their files come in as imports.
        if let Some((file, refs)) = messages.get(&name) {
            keep.insert(*file);
            stack.extend(refs.iter().cloned());
        }
    }
    let mut files: Vec<usize> = keep.iter().copied().collect();
    while let Some(i) = files.pop() {
        for dep in &set.file[i].dependency {
            if let Some(&d) = by_file.get(dep.as_str())
                && keep.insert(d)
            {
                files.push(d);
            }
        }
    }
    let mut out = FileDescriptorSet::default();
    for (i, file) in set.file.into_iter().enumerate() {
        if keep.contains(&i) {
            out.file.push(file);
        } else if !file.message_type.is_empty() {
            out.file.push(stand_in(file));
        }
    }
    Ok(out)
}

/// A file of field-less messages with the names (nested ones too) of `file`'s.
fn stand_in(file: FileDescriptorProto) -> FileDescriptorProto {
    fn names(list: &[DescriptorProto]) -> Vec<DescriptorProto> {
        list.iter()
            .map(|m| DescriptorProto {
                name: m.name.clone(),
                nested_type: names(&m.nested_type),
                ..Default::default()
            })
            .collect()
    }
    FileDescriptorProto {
        name: Some(format!("courier-stand-in/{}", file.name())),
        package: file.package.clone(),
        message_type: names(&file.message_type),
        syntax: file.syntax.clone(),
        ..Default::default()
    }
}

/// The `envoy-types` version pinned in the workspace (keep in step with Cargo.toml).
const ENVOY_TYPES_VERSION: &str = "0.7.7";

/// Fallback when `cargo metadata` cannot answer (e.g. while another cargo holds
/// the lock during a resolve): the package in cargo's registry sources.
fn find_in_cargo_home() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let registries = std::fs::read_dir(home.join("registry/src")).ok()?;
    registries
        .filter_map(Result::ok)
        .map(|r| r.path().join(format!("envoy-types-{ENVOY_TYPES_VERSION}")))
        .find(|dir| dir.join("src/generated/types.bin").exists())
}

/// The directory of the `envoy-types` package in this build's resolve.
fn find_envoy_types() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = meta["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?;
    for package in packages {
        if package["name"] == "envoy-types" {
            let manifest = package["manifest_path"]
                .as_str()
                .ok_or("no manifest_path")?;
            let dir = PathBuf::from(manifest);
            let dir = dir.parent().ok_or("manifest has no parent")?;
            println!(
                "cargo:rerun-if-changed={}",
                dir.join("src/generated/types.bin").display()
            );
            return Ok(dir.to_path_buf());
        }
    }
    Err("envoy-types is not in this build's dependency graph".into())
}
