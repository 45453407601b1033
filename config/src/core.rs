//! Translation of the `envoy.config.core.v3` building blocks every other module
//! uses: durations, addresses, data sources, `Any` unpacking, metadata.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::{ALL, Support};
use envoy_types::pb::envoy::config::core::v3 as core;
use envoy_types::pb::google::protobuf as pb;
use std::net::IpAddr;
use std::time::Duration;

/// Fields of the core messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    ("envoy.config.core.v3.Address", &["socket_address", "pipe"]),
    ("envoy.config.core.v3.Pipe", &["path", "mode"]),
    (
        "envoy.config.core.v3.SocketAddress",
        &["protocol", "address", "port_value", "ipv4_compat"],
    ),
    (
        "envoy.config.core.v3.DataSource",
        &[
            "filename",
            "inline_bytes",
            "inline_string",
            "environment_variable",
        ],
    ),
    (
        "envoy.config.core.v3.Node",
        &[
            "id",
            "cluster",
            "metadata",
            "locality",
            "user_agent_name",
            "client_features",
        ],
    ),
    ("envoy.config.core.v3.Locality", ALL),
    ("envoy.config.core.v3.Metadata", &["filter_metadata"]),
    (
        "envoy.config.core.v3.TransportSocket",
        &["name", "typed_config"],
    ),
    (
        "envoy.config.core.v3.RuntimeFractionalPercent",
        &["default_value"],
    ),
    ("envoy.type.v3.FractionalPercent", ALL),
    ("envoy.type.v3.Percent", ALL),
    ("envoy.type.v3.Int64Range", ALL),
    ("envoy.type.v3.Int32Range", ALL),
    ("envoy.type.v3.DoubleRange", ALL),
];

/// A listening or upstream address: a host (IP literal or DNS name) and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SocketAddress {
    /// The address as written: an IP literal for listeners and STATIC hosts, a
    /// DNS name for STRICT_DNS / LOGICAL_DNS hosts.
    pub host: String,
    /// The parsed IP, when `host` is an IP literal.
    pub ip: Option<IpAddr>,
    /// TCP port.
    pub port: u16,
}

impl std::fmt::Display for SocketAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ip {
            Some(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            _ => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// A Unix domain socket (`envoy.config.core.v3.Pipe`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pipe {
    /// The socket's path; one starting with `@` names a Linux abstract socket
    /// (no file: `@` stands for the leading NUL byte).
    pub path: String,
    /// `mode`: the permission bits a listening socket's file gets (at most
    /// 0777); 0 leaves the file as `bind` made it (the process's umask).
    pub mode: u32,
}

impl Pipe {
    /// Whether the path names a Linux abstract socket (`@name`).
    pub fn is_abstract(&self) -> bool {
        self.path.starts_with('@')
    }
}

/// `sockaddr_un.sun_path`'s size on Linux: a path (with its NUL) must fit.
pub const MAX_PIPE_PATH: usize = 108;

/// An `envoy.config.core.v3.Address`: a TCP socket address or a Unix domain
/// socket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// `socket_address`.
    Socket(SocketAddress),
    /// `pipe`.
    Pipe(Pipe),
}

impl Address {
    /// The TCP socket address, when this is one.
    pub fn socket(&self) -> Option<&SocketAddress> {
        match self {
            Address::Socket(sa) => Some(sa),
            Address::Pipe(_) => None,
        }
    }

    /// The Unix domain socket, when this is one.
    pub fn pipe(&self) -> Option<&Pipe> {
        match self {
            Address::Pipe(p) => Some(p),
            Address::Socket(_) => None,
        }
    }
}

/// As Envoy prints an address: `ip:port` (`[ip]:port`), or a pipe's path.
impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Socket(sa) => sa.fmt(f),
            Address::Pipe(p) => f.write_str(&p.path),
        }
    }
}

/// Translates an `Address`: a TCP socket address or a pipe.
pub fn address(addr: Option<&core::Address>, path: &Path<'_>, ctx: &mut Ctx) -> Option<Address> {
    use core::address::Address as A;
    let Some(addr) = addr else {
        ctx.error(path, "address is required");
        return None;
    };
    match &addr.address {
        Some(A::SocketAddress(sa)) => {
            socket_address(sa, &path.field("socket_address"), ctx).map(Address::Socket)
        }
        Some(A::Pipe(p)) => pipe(p, &path.field("pipe"), ctx).map(Address::Pipe),
        Some(A::EnvoyInternalAddress(_)) => {
            ctx.unsupported(&path.field("envoy_internal_address"), "an internal address");
            None
        }
        None => {
            ctx.error(path, "address is required (socket_address)");
            None
        }
    }
}

/// Translates an `Address` whose socket address may say `protocol: UDP`:
/// a UDP listener's (the listener code makes it one) and a cluster
/// endpoint's (Envoy ignores an endpoint's protocol: a UDP proxy's session
/// speaks UDP to any host, every other user TCP).
pub fn address_any_protocol(
    addr: Option<&core::Address>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Address> {
    use core::address::Address as A;
    let mut tcp_form = addr.cloned();
    if let Some(A::SocketAddress(sa)) = tcp_form.as_mut().and_then(|a| a.address.as_mut()) {
        sa.protocol = core::socket_address::Protocol::Tcp as i32;
    }
    address(tcp_form.as_ref(), path, ctx)
}

/// Translates an `Address` where only a TCP socket address will do; a pipe is
/// refused with `why` (what needs the IP address).
pub fn socket_only(
    addr: Option<&core::Address>,
    why: &str,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SocketAddress> {
    match address(addr, path, ctx)? {
        Address::Socket(sa) => Some(sa),
        Address::Pipe(_) => {
            ctx.error(
                &path.field("pipe"),
                format!("a pipe address is not allowed: {why}"),
            );
            None
        }
    }
}

/// Translates a `Pipe` with Envoy's checks: a path (at most 107 bytes, no NUL
/// byte but an abstract name's), a mode of at most 0777, none on an abstract
/// socket.
pub fn pipe(p: &core::Pipe, path: &Path<'_>, ctx: &mut Ctx) -> Option<Pipe> {
    let mut ok = true;
    if p.path.is_empty() {
        ctx.error(
            &path.field("path"),
            "value length must be at least 1 characters",
        );
        return None;
    }
    if p.path.len() >= MAX_PIPE_PATH {
        ctx.error(
            &path.field("path"),
            format!(
                "Path \"{}\" exceeds maximum UNIX domain socket path size of {MAX_PIPE_PATH}.",
                p.path
            ),
        );
        ok = false;
    }
    let is_abstract = p.path.starts_with('@');
    if !is_abstract && p.path.contains('\0') {
        ctx.error(
            &path.field("path"),
            "UNIX domain socket pathname contains embedded null characters",
        );
        ok = false;
    }
    if p.mode > 0o777 {
        ctx.error(
            &path.field("mode"),
            format!(
                "value must be less than or equal to 511 (0777), found {}",
                p.mode
            ),
        );
        ok = false;
    } else if is_abstract && p.mode != 0 {
        ctx.error(
            &path.field("mode"),
            "Cannot set mode for Abstract AF_UNIX sockets",
        );
        ok = false;
    }
    ok.then(|| Pipe {
        path: p.path.clone(),
        mode: p.mode,
    })
}

/// Translates a `SocketAddress`.
pub fn socket_address(
    sa: &core::SocketAddress,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<SocketAddress> {
    use core::socket_address::{PortSpecifier, Protocol};
    if sa.protocol != Protocol::Tcp as i32 {
        ctx.unsupported(&path.field("protocol"), "UDP");
    }
    if sa.address.is_empty() {
        ctx.error(&path.field("address"), "must not be empty");
        return None;
    }
    let port = match &sa.port_specifier {
        Some(PortSpecifier::PortValue(p)) => match u16::try_from(*p) {
            Ok(p) => p,
            Err(_) => {
                ctx.error(
                    &path.field("port_value"),
                    format!("{p} is not a port (0..=65535)"),
                );
                return None;
            }
        },
        Some(PortSpecifier::NamedPort(_)) => {
            ctx.unsupported(&path.field("named_port"), "named_port");
            return None;
        }
        None => 0,
    };
    let ip = sa
        .address
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .ok();
    Some(SocketAddress {
        host: sa.address.clone(),
        ip,
        port,
    })
}

/// Converts a proto `Duration`, refusing negative values.
pub fn duration(d: &pb::Duration, path: &Path<'_>, ctx: &mut Ctx) -> Option<Duration> {
    if d.seconds < 0 || d.nanos < 0 {
        ctx.error(path, "must not be negative");
        return None;
    }
    if d.nanos >= 1_000_000_000 {
        ctx.error(path, "nanos must be below one second");
        return None;
    }
    Some(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// An optional duration with a default, refusing negative values.
pub fn duration_or(
    d: Option<&pb::Duration>,
    default: Duration,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Duration {
    match d {
        Some(d) => duration(d, path, ctx).unwrap_or(default),
        None => default,
    }
}

/// An optional duration where zero (or absent) means "disabled".
pub fn optional_timeout(
    d: Option<&pb::Duration>,
    default: Option<Duration>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Duration> {
    match d {
        None => default,
        Some(d) => duration(d, path, ctx).filter(|d| !d.is_zero()),
    }
}

/// A `DataSource` read into bytes: inline, from a file, or from an environment variable.
///
/// Files are read at load time (as Envoy does), so `--mode validate` catches a
/// missing or unreadable certificate or JWKS file.
pub fn data_source(
    ds: Option<&core::DataSource>,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<u8>> {
    use core::data_source::Specifier;
    let Some(ds) = ds else {
        ctx.error(path, "a data source is required");
        return None;
    };
    match &ds.specifier {
        Some(Specifier::InlineBytes(b)) => Some(b.clone()),
        Some(Specifier::InlineString(s)) => Some(s.clone().into_bytes()),
        Some(Specifier::Filename(f)) => match std::fs::read(f) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                ctx.error(&path.field("filename"), format!("cannot read \"{f}\": {e}"));
                None
            }
        },
        Some(Specifier::EnvironmentVariable(v)) => match std::env::var(v) {
            Ok(s) => Some(s.into_bytes()),
            Err(_) => {
                ctx.error(
                    &path.field("environment_variable"),
                    format!("environment variable {v} is not set"),
                );
                None
            }
        },
        None => {
            ctx.error(
                path,
                "one of filename, inline_bytes, inline_string or environment_variable is required",
            );
            None
        }
    }
}

/// Decodes an `Any` as `M` after checking its type URL.
pub fn unpack<M: prost::Message + prost::Name + Default>(
    any: &pb::Any,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<M> {
    if any.type_url != M::type_url() {
        ctx.error(
            path,
            format!("expected @type {}, found {}", M::type_url(), any.type_url),
        );
        return None;
    }
    match M::decode(any.value.as_slice()) {
        Ok(m) => Some(m),
        Err(e) => {
            ctx.error(path, format!("cannot decode {}: {e}", any.type_url));
            None
        }
    }
}

/// The value of a `UInt32Value` wrapper, or `default` when absent.
pub fn u32_or(v: Option<&pb::UInt32Value>, default: u32) -> u32 {
    v.map_or(default, |v| v.value)
}

/// The value of a `BoolValue` wrapper, or `default` when absent.
pub fn bool_or(v: Option<&pb::BoolValue>, default: bool) -> bool {
    v.map_or(default, |v| v.value)
}

/// Converts a protobuf `Struct` into JSON (metadata, JWT payloads and matchers use JSON values).
pub fn struct_to_json(s: &pb::Struct) -> serde_json::Map<String, serde_json::Value> {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), value_to_json(v)))
        .collect()
}

/// Converts a protobuf `Value` into JSON.
pub fn value_to_json(v: &pb::Value) -> serde_json::Value {
    use pb::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(serde_json::Value::Null, Into::into)
        }
        Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
        Some(Kind::StructValue(s)) => serde_json::Value::Object(struct_to_json(s)),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(value_to_json).collect())
        }
    }
}

/// `filter_metadata` of a `Metadata`, as JSON objects per namespace.
pub type MetadataMap =
    std::collections::BTreeMap<String, serde_json::Map<String, serde_json::Value>>;

/// Translates `Metadata` (only `filter_metadata`).
pub fn metadata(m: Option<&core::Metadata>) -> MetadataMap {
    m.map(|m| {
        m.filter_metadata
            .iter()
            .map(|(k, v)| (k.clone(), struct_to_json(v)))
            .collect()
    })
    .unwrap_or_default()
}

/// A `FractionalPercent` as a probability in [0, 1].
pub fn fractional_percent(p: &envoy_types::pb::envoy::r#type::v3::FractionalPercent) -> f64 {
    use envoy_types::pb::envoy::r#type::v3::fractional_percent::DenominatorType as D;
    let denominator = match D::try_from(p.denominator).unwrap_or(D::Hundred) {
        D::Hundred => 100.0,
        D::TenThousand => 10_000.0,
        D::Million => 1_000_000.0,
    };
    (f64::from(p.numerator) / denominator).min(1.0)
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
