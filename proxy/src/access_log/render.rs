//! Rendering a line: command values, `-` for what is missing (Envoy's text
//! form), typed JSON values for lone commands (numbers for the numeric ones,
//! `null` for missing).

use super::{Entry, long_flag};
use crate::log_time as time;
use courier_config::format::{Command, FormatString, HeaderLookup, Part};
use courier_config::listener::access_log::{AccessLog, JsonValue, LogFormat};
use std::borrow::Cow;

/// A command's value.
enum Value<'a> {
    Text(Cow<'a, str>),
    Number(u64),
    /// A dynamic-metadata value: text as JSON (strings bare), typed in JSON logs.
    Json(&'a serde_json::Value),
    /// A whole dynamic-metadata namespace: text as JSON, an object in JSON logs
    /// (as Envoy's `Struct`).
    Object(serde_json::Value),
}

/// Renders one line onto `out` (with its newline for JSON; text formats carry
/// their own). Text is written straight into the writer's buffer.
pub fn line_into(log: &AccessLog, e: &Entry<'_>, out: &mut Vec<u8>) {
    format_into(&log.format, log.omit_empty_values, e, out);
}

/// Renders `format` onto `out` as [`line_into`] does; also what a direct
/// response's `body_format` makes its body with.
pub fn format_into(format: &LogFormat, omit_empty: bool, e: &Entry<'_>, out: &mut Vec<u8>) {
    match format {
        LogFormat::Text(fs) => text_into(fs, e, omit_empty, out),
        LogFormat::Json(fields) => {
            let mut map = serde_json::Map::new();
            object(fields, e, omit_empty, &mut map);
            let _ = serde_json::to_writer(&mut *out, &serde_json::Value::Object(map));
            out.push(b'\n');
        }
    }
}

/// One rendered line as a string (tests).
#[cfg(test)]
pub fn line(log: &AccessLog, e: &Entry<'_>) -> String {
    let mut out = Vec::new();
    line_into(log, e, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// `fs` rendered for `e` (missing values as `-` unless `omit_empty`).
pub(crate) fn text(fs: &FormatString, e: &Entry<'_>, omit_empty: bool) -> String {
    let mut out = Vec::new();
    text_into(fs, e, omit_empty, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn text_into(fs: &FormatString, e: &Entry<'_>, omit_empty: bool, out: &mut Vec<u8>) {
    use std::io::Write as _;
    for part in &fs.parts {
        match part {
            Part::Literal(s) => out.extend_from_slice(s.as_bytes()),
            // Envoy's body is a value even when empty (no `-`), and its bytes
            // go out as they are.
            Part::Command(Command::LocalReplyBody) => {
                out.extend_from_slice(e.local_reply_body.unwrap_or_default());
            }
            Part::Command(c) => match value(c, e) {
                Some(Value::Text(t)) if !t.is_empty() => out.extend_from_slice(t.as_bytes()),
                Some(Value::Number(n)) => {
                    let _ = write!(out, "{n}");
                }
                Some(Value::Json(v)) => out.extend_from_slice(json_text(v).as_bytes()),
                Some(Value::Object(v)) => out.extend_from_slice(json_text(&v).as_bytes()),
                _ if omit_empty => {}
                _ => out.push(b'-'),
            },
        }
    }
}

fn object(
    fields: &[(String, JsonValue)],
    e: &Entry<'_>,
    omit_empty: bool,
    map: &mut serde_json::Map<String, serde_json::Value>,
) {
    for (k, v) in fields {
        let v = json(v, e, omit_empty);
        if omit_empty && (v.is_null() || v.as_str() == Some("")) {
            continue;
        }
        map.insert(k.clone(), v);
    }
}

fn json(v: &JsonValue, e: &Entry<'_>, omit_empty: bool) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        JsonValue::Format(fs) => match fs.parts.as_slice() {
            [Part::Command(Command::LocalReplyBody)] => J::String(
                String::from_utf8_lossy(e.local_reply_body.unwrap_or_default()).into_owned(),
            ),
            [Part::Command(c)] => match value(c, e) {
                Some(Value::Number(n)) => J::from(n),
                Some(Value::Json(v)) => v.clone(),
                Some(Value::Object(v)) => v,
                Some(Value::Text(t)) if !t.is_empty() => J::String(t.into_owned()),
                _ => J::Null,
            },
            _ => J::String(text(fs, e, omit_empty)),
        },
        JsonValue::Object(fields) => {
            let mut map = serde_json::Map::new();
            object(fields, e, omit_empty, &mut map);
            J::Object(map)
        }
        JsonValue::List(items) => J::Array(items.iter().map(|i| json(i, e, omit_empty)).collect()),
        JsonValue::Number(n) => serde_json::Number::from_f64(*n).map_or(J::Null, J::Number),
        JsonValue::Bool(b) => J::Bool(*b),
        JsonValue::Null => J::Null,
    }
}

fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

fn value<'a>(c: &Command, e: &'a Entry<'_>) -> Option<Value<'a>> {
    let (req, resp) = (e.req, e.resp);
    if let Some((attempts, protocol)) = req.logs.connection() {
        // A connection has no request, response or route; flags may be several.
        match c {
            Command::Protocol => {
                return protocol
                    .map(|v| Value::Text(Cow::Borrowed(crate::router::headers::protocol(v))));
            }
            Command::ResponseCodeDetails => {
                return resp
                    .details
                    .as_deref()
                    .map(|d| Value::Text(Cow::Borrowed(d)));
            }
            Command::Request(_)
            | Command::Response(_)
            | Command::Trailer(_)
            | Command::ResponseDuration
            | Command::RequestDuration
            | Command::RouteName => return None,
            Command::ResponseFlagsLong => {
                return Some(Value::Text(Cow::Owned(long_flags(resp.flag))));
            }
            Command::UpstreamRequestAttemptCount => {
                return Some(Value::Number(u64::from(attempts)));
            }
            _ => {}
        }
    }
    if let super::Logs::Udp { proxy: true, .. } = &req.logs {
        // The filter's own stream info has no downstream connection.
        match c {
            Command::DownstreamRemoteAddress
            | Command::DownstreamRemoteAddressWithoutPort
            | Command::DownstreamDirectRemoteAddress
            | Command::DownstreamDirectRemoteAddressWithoutPort
            | Command::DownstreamLocalAddress
            | Command::DownstreamLocalAddressWithoutPort
            | Command::DownstreamLocalPort => return None,
            _ => {}
        }
    }
    if let super::Logs::Udp { upstream_local, .. } = &req.logs {
        // A UDP session's stream info: no request, response, route or
        // cluster (Envoy sets the host only), nor connect attempts.
        match c {
            Command::Request(_)
            | Command::Response(_)
            | Command::Trailer(_)
            | Command::Protocol
            | Command::ResponseCodeDetails
            | Command::ResponseDuration
            | Command::RequestDuration
            | Command::RouteName
            | Command::UpstreamCluster
            | Command::UpstreamTransportFailureReason => return None,
            Command::UpstreamRequestAttemptCount => return Some(Value::Number(0)),
            Command::ResponseFlagsLong => {
                return Some(Value::Text(Cow::Owned(long_flags(resp.flag))));
            }
            Command::UpstreamLocalAddress => {
                return Some(Value::Text(Cow::Owned(
                    upstream_local.as_ref()?.to_string(),
                )));
            }
            _ => {}
        }
    }
    let owned = |s: String| Some(Value::Text(Cow::Owned(s)));
    let text = |s: &'a str| Some(Value::Text(Cow::Borrowed(s)));
    match c {
        Command::StartTime(None) => {
            let mut s = String::new();
            time::default_format(req.start, &mut s);
            owned(s)
        }
        Command::StartTime(Some(f)) => {
            let mut s = String::new();
            time::strftime(req.start, f, &mut s);
            owned(s)
        }
        Command::Request(h) => request_header(h, e).map(Value::Text),
        Command::Response(h) => {
            if h.main == ":status" {
                return Some(Value::Text(Cow::Owned(resp.status.to_string())));
            }
            header(h, |n| resp.headers.get(n)?.to_str().ok()).map(Value::Text)
        }
        Command::Trailer(h) => {
            let t = resp.trailers.as_ref()?;
            header(h, |n| t.get(n)?.to_str().ok()).map(Value::Text)
        }
        Command::Protocol => text(crate::router::headers::protocol(req.version)),
        Command::LocalReplyBody => e
            .local_reply_body
            .map(|b| Value::Text(String::from_utf8_lossy(b))),
        Command::ResponseCode => Some(Value::Number(u64::from(resp.status))),
        Command::ResponseCodeDetails => text(code_details(resp)?),
        // Envoy prints `-` for no flags in both forms (a string in JSON, not null).
        Command::ResponseFlags => text(resp.flag.unwrap_or("-")),
        Command::ResponseFlagsLong => Some(Value::Text(Cow::Owned(long_flags(resp.flag)))),
        Command::BytesReceived => Some(Value::Number(e.bytes_received)),
        Command::BytesSent => Some(Value::Number(resp.bytes_sent)),
        Command::Duration => Some(Value::Number(ms(e.duration))),
        // Time to the upstream's response headers: none without an upstream.
        Command::ResponseDuration => resp
            .upstream
            .as_ref()
            .and_then(|u| u.host.as_ref())
            .map(|_| Value::Number(ms(resp.response_duration))),
        Command::UpstreamHost => text(resp.upstream.as_ref()?.host.as_ref()?.address_text()),
        Command::UpstreamCluster => text(&resp.upstream.as_ref()?.cluster.name),
        Command::UpstreamRequestAttemptCount => Some(Value::Number(u64::from(
            resp.upstream.as_ref().is_some_and(|u| u.host.is_some()),
        ))),
        Command::DownstreamRemoteAddress => match req.remote {
            Some(a) => owned(a.to_string()),
            None => owned(req.peer.to_string()),
        },
        Command::DownstreamDirectRemoteAddress => owned(req.peer.to_string()),
        Command::DownstreamRemoteAddressWithoutPort => match req.remote {
            Some(a) => owned(a.ip().to_string()),
            None => owned(req.peer.without_port().to_string()),
        },
        Command::DownstreamDirectRemoteAddressWithoutPort => {
            owned(req.peer.without_port().to_string())
        }
        Command::DownstreamLocalAddress => owned(req.local.to_string()),
        Command::DownstreamLocalAddressWithoutPort => owned(req.local.without_port().to_string()),
        // A pipe has no port: Envoy prints an empty string (not `-`).
        Command::DownstreamLocalPort => match req.local.port() {
            Some(port) => Some(Value::Number(u64::from(port))),
            None => {
                static EMPTY: serde_json::Value = serde_json::Value::String(String::new());
                Some(Value::Json(&EMPTY))
            }
        },
        Command::RouteName => text(resp.route_name.as_deref().filter(|n| !n.is_empty())?),
        Command::Hostname => text(crate::router::headers::hostname()),
        // Not recorded in this build: Envoy prints `-` for them when unknown too.
        Command::RequestDuration => e.request_duration.map(Value::Number),
        Command::RequestedServerName => text(req.server_name.as_deref()?),
        Command::TlsJa3Fingerprint => text(req.fingerprints.as_ref()?.ja3.as_deref()?),
        Command::TlsJa4Fingerprint => text(req.fingerprints.as_ref()?.ja4.as_deref()?),
        Command::ConnectionId => Some(Value::Number(req.connection_id)),
        Command::DynamicMetadata {
            namespace,
            path,
            max_length,
        } => {
            let object = resp.dynamic_metadata.0.get(namespace)?;
            let v = match path.split_first() {
                None if max_length.is_none() => {
                    return Some(Value::Object(serde_json::Value::Object(object.clone())));
                }
                None => {
                    return Some(Value::Text(Cow::Owned(truncate(
                        serde_json::Value::Object(object.clone()).to_string(),
                        *max_length,
                    ))));
                }
                Some((first, rest)) => rest
                    .iter()
                    .try_fold(object.get(first)?, |v, k| v.as_object()?.get(k))?,
            };
            match max_length {
                // Truncation works on the text form, as Envoy's.
                Some(n) => Some(Value::Text(Cow::Owned(truncate(json_text(v), Some(*n))))),
                None => Some(Value::Json(v)),
            }
        }
        Command::Environment { value, max_length } => Some(Value::Text(match max_length {
            Some(n) => Cow::Owned(truncate(value.as_deref()?, Some(*n))),
            None => Cow::Owned(value.clone()?),
        })),
        Command::ConnectionTerminationDetails => e
            .resp
            .termination_details
            .as_deref()
            .map(|d| Value::Text(Cow::Borrowed(d))),
        Command::UpstreamLocalAddress | Command::UpstreamTransportFailureReason => None,
    }
}

/// `%RESPONSE_FLAGS_LONG%` of a comma-separated list of short flags.
fn long_flags(short: Option<&str>) -> String {
    let Some(short) = short else {
        return "-".to_string();
    };
    short
        .split(',')
        .map(long_flag)
        .collect::<Vec<_>>()
        .join(",")
}

/// A metadata value as Envoy prints it in text: strings bare, the rest as JSON.
fn json_text(v: &serde_json::Value) -> Cow<'_, str> {
    match v {
        serde_json::Value::String(s) => Cow::Borrowed(s),
        other => Cow::Owned(other.to_string()),
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn truncate(s: impl Into<String>, max: Option<usize>) -> String {
    let mut s = s.into();
    if let Some(n) = max
        && s.len() > n
    {
        let mut end = n;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn request_header<'a>(h: &HeaderLookup, e: &'a Entry<'_>) -> Option<Cow<'a, str>> {
    let req = e.req;
    header(h, |name| match name {
        ":method" => Some(req.method.as_str()),
        ":path" => Some(req.uri.path_and_query().map_or("/", |p| p.as_str())),
        ":authority" | "host" => req
            .uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| req.headers.get(http::header::HOST)?.to_str().ok()),
        ":scheme" => Some(req.uri.scheme_str().unwrap_or("http")),
        _ => req.headers.get(name)?.to_str().ok(),
    })
}

fn header<'a>(h: &HeaderLookup, get: impl Fn(&str) -> Option<&'a str>) -> Option<Cow<'a, str>> {
    let v = get(&h.main).or_else(|| h.alternative.as_deref().and_then(&get))?;
    let v = match h.max_length {
        Some(n) if v.len() > n => {
            // Cut on a character boundary at or below `n`.
            let mut end = n;
            while !v.is_char_boundary(end) {
                end -= 1;
            }
            &v[..end]
        }
        _ => v,
    };
    Some(Cow::Borrowed(v))
}

/// `%RESPONSE_CODE_DETAILS%` (and CEL's `response.code_details`): what the
/// router set, else what the response flag or the route's answer implies.
pub(crate) fn code_details(resp: &super::ResponseSide) -> Option<&str> {
    Some(match (resp.flag, &resp.upstream) {
        _ if resp.details.is_some() => resp.details.as_deref()?,
        (Some("NR"), _) => "route_not_found",
        (Some("NC"), _) => "cluster_not_found",
        (Some("UH"), _) => "no_healthy_upstream",
        (Some("UT"), _) => "upstream_response_timeout",
        (Some("UMSDR"), _) => "upstream_max_stream_duration_reached",
        // Fault injection's delay leaves the answer the upstream's.
        (None | Some("DI"), Some(u)) if u.host.is_some() => "via_upstream",
        (None, None) if resp.direct => "direct_response",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Logs, Pending, ResponseSide};
    use super::*;
    use crate::request::body::RequestProgress;
    use courier_config::format::parse;
    use courier_config::listener::access_log::Sink;
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    fn pending() -> Pending {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-long", http::HeaderValue::from_static("abcdefgh"));
        headers.insert("user-agent", http::HeaderValue::from_static("ua/1"));
        Pending {
            logs: Logs::Admin(Arc::from(Vec::new())),
            start: UNIX_EPOCH + Duration::new(1_796_227_992, 464_000_000),
            started: tokio::time::Instant::now(),
            method: http::Method::GET,
            uri: "/p?q=1".parse().unwrap(),
            version: http::Version::HTTP_11,
            headers,
            peer: crate::request::conn::Peer::Ip("10.0.0.1:5000".parse().unwrap()),
            remote: None,
            local: crate::request::conn::Peer::Ip("127.0.0.1:80".parse().unwrap()),
            server_name: None,
            fingerprints: None,
            connection_id: 7,
            request: Arc::new(RequestProgress::new(true)),
            span: None,
        }
    }

    fn log(format: LogFormat, omit: bool) -> AccessLog {
        AccessLog {
            filter: None,
            path: "/dev/null".into(),
            sink: Sink::File("/dev/null".into()),
            format,
            omit_empty_values: omit,
        }
    }

    #[test]
    fn text_values_missing_dashes_and_omission() {
        let req = pending();
        let resp = ResponseSide {
            status: 204,
            ..ResponseSide::default()
        };
        let e = Entry {
            req: &req,
            resp: &resp,
            duration: Duration::from_millis(12),
            bytes_received: 0,
            request_duration: None,
            local_reply_body: None,
        };
        let f = parse(
            "%START_TIME% %REQ(:PATH)% %REQ(X-LONG):3% %REQ(X-NO?USER-AGENT)% %REQ(X-NO)% %RESPONSE_CODE% %DURATION% %REQUEST_DURATION% %CONNECTION_ID% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%\n",
        )
        .unwrap();
        assert_eq!(
            line(&log(LogFormat::Text(f.clone()), false), &e),
            "2026-12-02T16:13:12.464Z /p?q=1 abc ua/1 - 204 12 - 7 10.0.0.1\n"
        );
        assert_eq!(
            line(&log(LogFormat::Text(f), true), &e),
            "2026-12-02T16:13:12.464Z /p?q=1 abc ua/1  204 12  7 10.0.0.1\n"
        );
        let json = LogFormat::Json(vec![
            ("a".into(), JsonValue::Format(parse("%REQ(X-NO)%").unwrap())),
            (
                "b".into(),
                JsonValue::Format(parse("%RESPONSE_CODE%").unwrap()),
            ),
        ]);
        assert_eq!(
            line(&log(json.clone(), false), &e),
            "{\"a\":null,\"b\":204}\n"
        );
        assert_eq!(line(&log(json, true), &e), "{\"b\":204}\n");
    }
}
