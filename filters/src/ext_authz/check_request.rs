//! The `CheckRequest` Envoy sends (envoy-reference 3.2 step 4).

use super::metadata::to_struct;
use crate::request::RequestState;
use courier_config::filters::ext_authz::ExtAuthz;
use courier_config::matcher::StringMatcher;
use envoy_types::pb::envoy::config::core::v3::{
    Address, Metadata, SocketAddress, address, socket_address,
};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
    HttpRequest, Peer, Request as AttrRequest,
};
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use envoy_types::pb::google::protobuf::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Pre-parsed: looked up on every check.
static DOWNSTREAM_SERVICE_CLUSTER: http::HeaderName =
    http::HeaderName::from_static("x-envoy-downstream-service-cluster");

/// Request ids: Envoy sends its stream id (not `x-request-id`), a per-process number.
static STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// `n` in decimal, appended to `out` (`Display` for numbers and IPv4 addresses goes
/// through the formatting machinery: several times the cost, on every check).
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    // At most 20 rounds: a u64 has at most 20 digits.
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for d in &digits[i..] {
        out.push(char::from(*d));
    }
}

fn decimal(n: u64) -> String {
    let mut s = String::with_capacity(20);
    push_decimal(&mut s, n);
    s
}

/// `v4` as `Display` writes it, into `buf`; returns the length.
pub(super) fn ipv4_into(v4: std::net::Ipv4Addr, buf: &mut [u8; 15]) -> usize {
    let mut n = 0;
    for (i, o) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            buf[n] = b'.';
            n += 1;
        }
        if o >= 100 {
            buf[n] = b'0' + o / 100;
            n += 1;
        }
        if o >= 10 {
            buf[n] = b'0' + (o / 10) % 10;
            n += 1;
        }
        buf[n] = b'0' + o % 10;
        n += 1;
    }
    n
}

/// `ip` as `Display` writes it.
pub(super) fn ip_string(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let mut s = String::with_capacity(15);
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    s.push('.');
                }
                push_decimal(&mut s, u64::from(o));
            }
            s
        }
        IpAddr::V6(v6) => v6.to_string(),
    }
}

fn socket_address(a: SocketAddr) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: ip_string(a.ip()),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(u32::from(
                a.port(),
            ))),
            ..Default::default()
        })),
    }
}

/// The peer certificate's principal: URI SAN, else DNS SAN, else subject.
fn source_principal(req: &RequestState<'_>) -> String {
    let Some(cert) = req.conn.tls.as_ref().and_then(|t| t.peer_cert.as_ref()) else {
        return String::new();
    };
    cert.uri_sans
        .first()
        .or(cert.dns_sans.first())
        .cloned()
        .unwrap_or_else(|| cert.subject.clone())
}

fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

fn listed(list: &Option<Vec<StringMatcher>>, name: &str) -> Option<bool> {
    list.as_ref().map(|l| l.iter().any(|m| m.matches(name)))
}

/// A header value as sent: not UTF-8 is `!`.
fn text(v: &http::HeaderValue) -> &str {
    std::str::from_utf8(v.as_bytes()).unwrap_or("!")
}

/// Calls `f` with each request header sent with a gRPC check: pseudo-headers and every
/// header (or those `allowed_headers` matches, minus `disallowed_headers`), each name
/// once, repeats joined by `,`, values that are not UTF-8 as `!`.
pub(super) fn each_header(req: &RequestState<'_>, cfg: &ExtAuthz, mut f: impl FnMut(&str, &str)) {
    let keep = |name: &str| {
        listed(&cfg.allowed_headers, name) != Some(false)
            && listed(&cfg.disallowed_headers, name) != Some(true)
    };
    let authority = req.authority();
    let pseudo = [
        (":authority", Some(authority).filter(|a| !a.is_empty())),
        (":method", Some(req.head.method.as_str())),
        (":path", Some(req.path())),
        (":scheme", Some(req.scheme())),
    ];
    for (name, value) in pseudo {
        if let Some(v) = value
            && keep(name)
        {
            f(name, v);
        }
    }
    // One pass over the map in its order (each name's values together), rather than a
    // hashed `get_all` per name: the values of a repeated name are joined.
    let mut current: Option<(&http::HeaderName, &str, Option<String>)> = None;
    let mut flush = |c: Option<(&http::HeaderName, &str, Option<String>)>| {
        if let Some((name, first, joined)) = c {
            f(name.as_str(), joined.as_deref().unwrap_or(first));
        }
    };
    for (name, value) in req.head.headers.iter() {
        if let Some((n, first, joined)) = current.as_mut()
            && *n == name
        {
            let j = joined.get_or_insert_with(|| String::from(*first));
            j.push(',');
            j.push_str(text(value));
            continue;
        }
        let n = name.as_str();
        let next = (n != "host" && keep(n)).then(|| (name, text(value), None));
        // A new name (kept or not) ends the previous one's run.
        flush(std::mem::replace(&mut current, next));
    }
    flush(current);
}

fn headers(req: &RequestState<'_>, cfg: &ExtAuthz) -> HashMap<String, String> {
    let mut out = HashMap::with_capacity(req.head.headers.keys_len() + 4);
    each_header(req, cfg, |k, v| {
        out.insert(k.to_string(), v.to_string());
    });
    out
}

/// The scalar parts of a check, shared by [`build`] and the wire encoder.
pub(super) struct Fields {
    /// `request.http.id`.
    pub id: String,
    /// `source.service`.
    pub service: String,
    /// `source.principal`.
    pub principal: String,
    /// `request.time`: seconds and nanos.
    pub time: (i64, i32),
    /// `request.http.size`.
    pub size: i64,
    /// `request.http.protocol`.
    pub protocol: &'static str,
    /// The body goes as `raw_body` (`pack_as_bytes`), else as `body`.
    pub raw_body: bool,
}

impl Fields {
    pub(super) fn of(req: &RequestState<'_>, cfg: &ExtAuthz, body: Option<&[u8]>) -> Self {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Fields {
            id: decimal(STREAM_ID.fetch_add(1, Ordering::Relaxed)),
            service: req
                .head
                .headers
                .get(&DOWNSTREAM_SERVICE_CLUSTER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
            principal: source_principal(req),
            time: (now.as_secs() as i64, now.subsec_nanos() as i32),
            size: req
                .head
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .or_else(|| body.map(|b| b.len() as i64))
                .unwrap_or(0),
            protocol: protocol(req.head.version),
            raw_body: matches!(cfg.with_request_body, Some(s) if s.pack_as_bytes),
        }
    }
}

/// Builds the check for `req`: `context` is the merged `context_extensions`, `body` what
/// was buffered (already cut to `max_request_bytes`).
pub fn build(
    req: &RequestState<'_>,
    cfg: &ExtAuthz,
    context: &BTreeMap<String, String>,
    body: Option<&[u8]>,
) -> CheckRequest {
    let f = Fields::of(req, cfg, body);
    let mut http = HttpRequest {
        id: f.id,
        method: req.head.method.as_str().to_string(),
        headers: headers(req, cfg),
        path: req.path().to_string(),
        host: req.authority().to_string(),
        scheme: req.scheme().to_string(),
        protocol: f.protocol.to_string(),
        size: f.size,
        ..Default::default()
    };
    if let Some(b) = body {
        if f.raw_body {
            http.raw_body = b.to_vec();
        } else {
            http.body = String::from_utf8_lossy(b).into_owned();
        }
    }
    let mut filter_metadata = HashMap::new();
    for ns in &cfg.metadata_context_namespaces {
        if let Some(obj) = req.metadata.get(ns) {
            filter_metadata.insert(ns.clone(), to_struct(obj));
        }
    }
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(socket_address(req.conn.peer)),
                principal: f.principal,
                service: f.service,
                ..Default::default()
            }),
            destination: Some(Peer {
                address: Some(socket_address(req.conn.local)),
                ..Default::default()
            }),
            request: Some(AttrRequest {
                time: Some(Timestamp {
                    seconds: f.time.0,
                    nanos: f.time.1,
                }),
                http: Some(http),
            }),
            context_extensions: context
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            metadata_context: Some(Metadata {
                filter_metadata,
                ..Default::default()
            }),
            // Always there, as Envoy sends it (empty without namespaces).
            route_metadata_context: Some(Metadata {
                filter_metadata: route_metadata(cfg, req)
                    .map(|(ns, obj)| (ns.to_string(), to_struct(obj)))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// The selected route's metadata in `route_metadata_context_namespaces`, in
/// the configured order.
pub(crate) fn route_metadata<'a>(
    cfg: &'a courier_config::filters::ExtAuthz,
    req: &'a RequestState<'_>,
) -> impl Iterator<Item = (&'a str, &'a serde_json::Map<String, serde_json::Value>)> + 'a {
    let route = req.route.and_then(|r| r.metadata);
    cfg.route_metadata_context_namespaces
        .iter()
        .filter_map(move |ns| Some((ns.as_str(), route?.get(ns)?)))
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn headers_go_once_per_name_in_order_repeats_joined() {
        use crate::test_support::{filter_config, head, plain_conn, state};
        let f = filter_config(
            "name: envoy.filters.http.ext_authz\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n  grpc_service: {envoy_grpc: {cluster_name: authz}}\n  allowed_headers: {patterns: [{exact: x-a}, {exact: x-c}, {exact: x-d}, {prefix: ':'}]}\n",
        );
        let courier_config::filters::HttpFilterConfig::ExtAuthz(cfg) = f.config else {
            panic!("not ext_authz");
        };
        let conn = plain_conn();
        let mut req = state(
            &conn,
            head(
                "GET",
                "/p",
                &[
                    ("host", "example.com"),
                    ("x-a", "1"),
                    ("x-b", "skipped"),
                    ("x-a", "2"),
                    ("x-b", "skipped too"),
                    ("x-c", "3"),
                    ("x-d", "4"),
                    ("x-d", "5"),
                    ("x-d", "6"),
                ],
            ),
        );
        req.head
            .headers
            .append("x-c", http::HeaderValue::from_bytes(b"\xff").unwrap());
        let mut seen = Vec::new();
        each_header(&req, &cfg, |k, v| seen.push(format!("{k}={v}")));
        assert_eq!(
            seen,
            [
                ":authority=example.com",
                ":method=GET",
                ":path=/p",
                ":scheme=http",
                "x-a=1,2",
                "x-c=3,!",
                "x-d=4,5,6",
            ]
        );
    }

    #[test]
    fn numbers_and_addresses_format_as_display_does() {
        for n in [0u64, 7, 10, 99, 255, 1_000_000, u64::MAX] {
            assert_eq!(decimal(n), n.to_string());
        }
        for ip in [
            "0.0.0.0",
            "127.0.0.1",
            "10.200.3.45",
            "255.255.255.255",
            "::1",
            "fe80::1:2",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(ip_string(ip), ip.to_string());
            if let IpAddr::V4(v4) = ip {
                let mut buf = [0u8; 15];
                let n = ipv4_into(v4, &mut buf);
                assert_eq!(&buf[..n], ip.to_string().as_bytes());
            }
        }
    }
}
