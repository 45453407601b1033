//! The `CheckRequest` written straight to protobuf wire format from the request, as a
//! length-prefixed gRPC message: the same message [`super::check_request::build`] makes,
//! without building (and then dropping) the prost structs, their strings and maps, on
//! every check.

use super::check_request::{self, Fields};
use super::metadata::to_struct;
use crate::request::RequestState;
use bytes::Bytes;
use courier_config::filters::ext_authz::ExtAuthz;
use prost::Message;
use std::collections::BTreeMap;

const VARINT: u32 = 0;
const LEN: u32 = 2;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    // At most 10 rounds: 7 bits each.
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from((field << 3) | wire));
}

/// A string or bytes field; proto3 leaves empty ones out.
fn bytes(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    if !v.is_empty() {
        key(out, field, LEN);
        varint(out, v.len() as u64);
        out.extend_from_slice(v);
    }
}

/// An integer field (negative values as 10-byte two's complement, as protobuf's int32
/// and int64); zero is left out.
fn int(out: &mut Vec<u8>, field: u32, v: i64) {
    if v != 0 {
        key(out, field, VARINT);
        varint(out, v as u64);
    }
}

/// A message field: its body is written in place after a one-byte length, which is
/// widened (the body moved) when the body is 128 bytes or more.
fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let end = out.len();
    let mut len = (end - at - 1) as u64;
    if len < 0x80 {
        out[at] = len as u8;
        return;
    }
    let mut prefix = [0u8; 10];
    let mut n = 0;
    // At most 10 rounds: 7 bits each.
    while len >= 0x80 {
        prefix[n] = (len as u8) | 0x80;
        len >>= 7;
        n += 1;
    }
    prefix[n] = len as u8;
    n += 1;
    out.resize(end + n - 1, 0);
    out.copy_within(at + 1..end, at + n);
    out[at..at + n].copy_from_slice(&prefix[..n]);
}

fn map_entry(out: &mut Vec<u8>, field: u32, k: &str, v: &str) {
    message(out, field, |o| {
        bytes(o, 1, k.as_bytes());
        bytes(o, 2, v.as_bytes());
    });
}

/// `Address{socket_address{address, port_value}}`.
fn address(out: &mut Vec<u8>, field: u32, a: std::net::SocketAddr) {
    message(out, field, |o| {
        message(o, 1, |o| {
            match a.ip() {
                std::net::IpAddr::V4(v4) => {
                    let mut buf = [0u8; 15];
                    let n = check_request::ipv4_into(v4, &mut buf);
                    bytes(o, 2, &buf[..n]);
                }
                ip => bytes(o, 2, check_request::ip_string(ip).as_bytes()),
            }
            int(o, 3, i64::from(a.port()));
        });
    });
}

/// The gRPC message (flag, 4-byte length, `CheckRequest`) for `req`: `context` is the
/// merged `context_extensions`, `body` what was buffered (already cut).
pub fn check_frame(
    req: &RequestState<'_>,
    cfg: &ExtAuthz,
    context: &BTreeMap<String, String>,
    body: Option<&[u8]>,
) -> Bytes {
    let f = Fields::of(req, cfg, body);
    let mut out = Vec::with_capacity(512 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(&[0; 5]);
    message(&mut out, 1, |o| {
        message(o, 1, |o| {
            address(o, 1, req.conn.peer);
            bytes(o, 2, f.service.as_bytes());
            bytes(o, 4, f.principal.as_bytes());
        });
        message(o, 2, |o| address(o, 1, req.conn.local));
        message(o, 4, |o| {
            message(o, 1, |o| {
                int(o, 1, f.time.0);
                int(o, 2, i64::from(f.time.1));
            });
            message(o, 2, |o| {
                bytes(o, 1, f.id.as_bytes());
                bytes(o, 2, req.head.method.as_str().as_bytes());
                check_request::each_header(req, cfg, |k, v| map_entry(o, 3, k, v));
                bytes(o, 4, req.path().as_bytes());
                bytes(o, 5, req.authority().as_bytes());
                bytes(o, 6, req.scheme().as_bytes());
                int(o, 9, f.size);
                bytes(o, 10, f.protocol.as_bytes());
                if let Some(b) = body {
                    if f.raw_body {
                        bytes(o, 12, b);
                    } else {
                        bytes(o, 11, String::from_utf8_lossy(b).as_bytes());
                    }
                }
            });
        });
        for (k, v) in context {
            map_entry(o, 10, k, v);
        }
        message(o, 11, |o| {
            for ns in &cfg.metadata_context_namespaces {
                if let Some(obj) = req.metadata.get(ns) {
                    let s = to_struct(obj);
                    message(o, 1, |o| {
                        bytes(o, 1, ns.as_bytes());
                        key(o, 2, LEN);
                        varint(o, s.encoded_len() as u64);
                        s.encode_raw(o);
                    });
                }
            }
        });
        // Always there, as Envoy sends it (empty without namespaces).
        message(o, 13, |o| {
            for (ns, obj) in super::check_request::route_metadata(cfg, req) {
                let s = to_struct(obj);
                message(o, 1, |o| {
                    bytes(o, 1, ns.as_bytes());
                    key(o, 2, LEN);
                    varint(o, s.encoded_len() as u64);
                    s.encode_raw(o);
                });
            }
        });
    });
    let len = (out.len() - 5) as u32;
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{filter_config, head, plain_conn, state};
    use courier_config::filters::HttpFilterConfig;
    use envoy_types::pb::envoy::service::auth::v3::CheckRequest;

    fn config(extra: &str) -> ExtAuthz {
        let f = filter_config(&format!(
            "name: envoy.filters.http.ext_authz\ntyped_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz\n  grpc_service: {{envoy_grpc: {{cluster_name: authz}}}}\n{extra}"
        ));
        match f.config {
            HttpFilterConfig::ExtAuthz(c) => *c,
            _ => panic!("not ext_authz"),
        }
    }

    /// The id and time differ between two checks; everything else must not.
    fn normalized(mut c: CheckRequest) -> CheckRequest {
        let r = c.attributes.as_mut().unwrap().request.as_mut().unwrap();
        r.time = None;
        r.http.as_mut().unwrap().id.clear();
        c
    }

    fn same_as_prost(cfg: &ExtAuthz, req: &RequestState<'_>, body: Option<&[u8]>) {
        let mut context = BTreeMap::new();
        context.insert("k".to_string(), "v".to_string());
        context.insert("empty".to_string(), String::new());
        let frame = check_frame(req, cfg, &context, body);
        assert_eq!(frame[0], 0);
        assert_eq!(
            u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize,
            frame.len() - 5
        );
        let wire = CheckRequest::decode(&frame[5..]).unwrap();
        let built = check_request::build(req, cfg, &context, body);
        assert_eq!(normalized(wire), normalized(built));
    }

    #[test]
    fn the_wire_check_decodes_to_the_built_one() {
        let conn = plain_conn();
        let long = "x".repeat(300);
        let mut req = state(
            &conn,
            head(
                "POST",
                "/p/a?q=1#f",
                &[
                    ("host", "example.com"),
                    ("x-dup", "a"),
                    ("x-dup", "b"),
                    ("x-long", &long),
                    ("content-length", "5"),
                    ("x-envoy-downstream-service-cluster", "svc"),
                ],
            ),
        );
        req.head
            .headers
            .append("x-bin", http::HeaderValue::from_bytes(b"\xff").unwrap());
        let mut md = serde_json::Map::new();
        md.insert("sub".into(), "alice".into());
        md.insert("n".into(), serde_json::json!({"a": [1, true, null]}));
        req.merge_metadata("jwt", md);
        same_as_prost(&config(""), &req, None);
        same_as_prost(
            &config(
                "  metadata_context_namespaces: [jwt, absent]\n  with_request_body: {max_request_bytes: 100}\n",
            ),
            &req,
            Some(b"hello"),
        );
        same_as_prost(
            &config(
                "  with_request_body: {max_request_bytes: 100, pack_as_bytes: true}\n  allowed_headers: {patterns: [{exact: x-dup}]}\n",
            ),
            &req,
            Some(b"\x00\xffraw"),
        );
    }
}
