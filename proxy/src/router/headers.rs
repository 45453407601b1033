//! Header mutations (`*_headers_to_add` / `*_headers_to_remove` at weighted-cluster,
//! route, virtual-host and route-config level), the format-string commands their
//! values may use, and hop-by-hop header removal.

use crate::request::conn::ConnInfo;
use courier_config::format::{Command, FormatString, HeaderLookup, Part};
use courier_config::route::HeaderMutations;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// What a header value's `%COMMAND%`s can refer to.
pub struct FormatCtx<'a> {
    /// `:method`.
    pub method: &'a str,
    /// `:path` (with query).
    pub path: &'a str,
    /// `:authority`.
    pub authority: &'a str,
    /// `:scheme`.
    pub scheme: &'a str,
    /// Request headers.
    pub request: &'a HeaderMap,
    /// Response headers and status, on the response side.
    pub response: Option<(&'a HeaderMap, u16)>,
    /// The downstream connection.
    pub conn: &'a ConnInfo,
    /// The client address taken from the headers
    /// ([`ClientAddress`](crate::request::conn::ClientAddress)), if any.
    pub remote: Option<std::net::SocketAddr>,
    /// `HTTP/1.1`, `HTTP/2`...
    pub protocol: &'static str,
    /// The picked upstream host (`ip:port`), if any.
    pub upstream_host: Option<&'a str>,
    /// The upstream cluster, if any.
    pub cluster: &'a str,
    /// The route's name.
    pub route_name: &'a str,
}

/// The commands header values may use in this build; `serve_check` refuses others.
pub fn supported(c: &Command) -> bool {
    matches!(
        c,
        Command::Request(_)
            | Command::Response(_)
            | Command::Protocol
            | Command::ResponseCode
            | Command::UpstreamHost
            | Command::UpstreamCluster
            | Command::DownstreamRemoteAddress
            | Command::DownstreamRemoteAddressWithoutPort
            | Command::DownstreamDirectRemoteAddress
            | Command::DownstreamDirectRemoteAddressWithoutPort
            | Command::DownstreamLocalAddress
            | Command::DownstreamLocalAddressWithoutPort
            | Command::DownstreamLocalPort
            | Command::RouteName
            | Command::Hostname
    )
}

/// The request protocol as `%PROTOCOL%` names it.
pub fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}

impl FormatCtx<'_> {
    /// Evaluates `fs` (unknown or absent values are empty, as Envoy's header formatter).
    pub fn eval(&self, fs: &FormatString) -> String {
        let mut out = String::new();
        for part in &fs.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Command(c) => self.command(c, &mut out),
            }
        }
        out
    }

    fn command(&self, c: &Command, out: &mut String) {
        use std::fmt::Write;
        let conn = self.conn;
        match c {
            Command::Request(h) => self.lookup(h, true, out),
            Command::Response(h) => self.lookup(h, false, out),
            Command::Protocol => out.push_str(self.protocol),
            Command::ResponseCode => {
                if let Some((_, code)) = self.response {
                    let _ = write!(out, "{code}");
                }
            }
            Command::UpstreamHost => out.push_str(self.upstream_host.unwrap_or("")),
            Command::UpstreamCluster => out.push_str(self.cluster),
            Command::DownstreamRemoteAddress => match self.remote {
                Some(a) => {
                    let _ = write!(out, "{a}");
                }
                None => {
                    let _ = write!(out, "{}", conn.peer);
                }
            },
            Command::DownstreamDirectRemoteAddress => {
                let _ = write!(out, "{}", conn.peer);
            }
            Command::DownstreamRemoteAddressWithoutPort => match self.remote {
                Some(a) => {
                    let _ = write!(out, "{}", a.ip());
                }
                None => {
                    let _ = write!(out, "{}", conn.peer.without_port());
                }
            },
            Command::DownstreamDirectRemoteAddressWithoutPort => {
                let _ = write!(out, "{}", conn.peer.without_port());
            }
            Command::DownstreamLocalAddress => {
                let _ = write!(out, "{}", conn.local);
            }
            Command::DownstreamLocalAddressWithoutPort => {
                let _ = write!(out, "{}", conn.local.without_port());
            }
            Command::DownstreamLocalPort => {
                if let Some(port) = conn.local.port() {
                    let _ = write!(out, "{port}");
                }
            }
            Command::RouteName => out.push_str(self.route_name),
            Command::Hostname => out.push_str(hostname()),
            _ => {}
        }
    }

    fn lookup(&self, h: &HeaderLookup, request: bool, out: &mut String) {
        if !request && h.main == ":status" {
            if let Some((_, code)) = self.response {
                out.push_str(&code.to_string());
            }
            return;
        }
        let get = |name: &str| -> Option<&str> {
            if request {
                match name {
                    ":method" => return Some(self.method),
                    ":path" => return Some(self.path),
                    ":authority" | "host" => return Some(self.authority),
                    ":scheme" => return Some(self.scheme),
                    _ => {}
                }
                self.request.get(name)?.to_str().ok()
            } else {
                self.response?.0.get(name)?.to_str().ok()
            }
        };
        let value = get(&h.main).or_else(|| h.alternative.as_deref().and_then(get));
        if let Some(v) = value {
            let v = match h.max_length {
                Some(n) if v.len() > n => v.get(..n).unwrap_or(v),
                _ => v,
            };
            out.push_str(v);
        }
    }
}

/// The machine's host name (`%HOSTNAME%`).
pub fn hostname() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// Applies `levels` in order (each: removals, then additions with values evaluated
/// against the headers as they were when the level started).
pub fn apply(
    headers: &mut HeaderMap,
    levels: &[&HeaderMutations],
    ctx: impl Fn(&HeaderMap, &FormatString) -> String,
) {
    for m in levels {
        if m.is_empty() {
            continue;
        }
        for name in &m.remove {
            headers.remove(name.as_str());
        }
        let adds: Vec<_> = m
            .add
            .iter()
            .filter_map(|a| {
                let value = ctx(headers, &a.value);
                if value.is_empty() && !a.keep_empty_value {
                    return None;
                }
                let name = HeaderName::from_bytes(a.name.as_bytes()).ok()?;
                let value = HeaderValue::from_str(&value).ok()?;
                Some((name, value, a.action))
            })
            .collect();
        for (name, value, action) in adds {
            courier_filters::header_mutation::add(headers, name, value, action);
        }
    }
}

/// `n` as a header value. Below 100 (an upstream service time in
/// milliseconds, mostly) it comes from a static table; above, the thread's
/// last such value is reused when `n` repeats (the expected request timeout is
/// the route's timeout on every request): `HeaderValue::from(u64)` allocates
/// for every value.
pub fn number(n: u64) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(u64, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    if n >= 100 {
        return LAST.with_borrow_mut(|last| match last {
            Some((m, v)) if *m == n => v.clone(),
            _ => {
                let v = HeaderValue::from(n);
                *last = Some((n, v.clone()));
                v
            }
        });
    }
    const PAIRS: &str = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
    let at = usize::try_from(n).unwrap_or(usize::MAX);
    let digits = match at {
        0..=9 => PAIRS.get(2 * at + 1..2 * at + 2),
        10..=99 => PAIRS.get(2 * at..2 * at + 2),
        _ => None,
    };
    digits.map_or_else(|| HeaderValue::from(n), HeaderValue::from_static)
}

/// Removes the hop-by-hop headers (and those `connection` names) before a message
/// crosses the proxy; `te: trailers` survives (gRPC needs it).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names first: most messages carry none of these, and each
    // removal by name below hashes that name.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if let header::Entry::Occupied(e) = headers.entry(header::CONNECTION) {
        let named: Vec<String> = e
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty() && t != "te")
            .collect();
        e.remove_entry_mult().1.for_each(drop);
        for n in named {
            headers.remove(n.as_str());
        }
    }
    for h in [
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(h);
    }
    if let Some(te) = headers.get(header::TE)
        && !te.as_bytes().eq_ignore_ascii_case(b"trailers")
    {
        headers.remove(header::TE);
    }
}

/// A header `strip_hop_by_hop` may remove (`connection` may name others).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name == header::TE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_go_te_trailers_stays() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["te", "x-kept"]);
    }

    #[test]
    fn compacted_values_are_the_same_and_share_one_buffer() {
        let read = bytes::Bytes::from_static(b"text/plain;secret;a, b");
        let mut h = HeaderMap::new();
        h.insert(
            "content-type",
            HeaderValue::from_maybe_shared(read.slice(0..10)).unwrap(),
        );
        let mut secret = HeaderValue::from_maybe_shared(read.slice(11..17)).unwrap();
        secret.set_sensitive(true);
        h.insert("authorization", secret);
        h.append("x-list", HeaderValue::from_static("a"));
        h.append("x-list", HeaderValue::from_static(""));
        h.append("x-list", HeaderValue::from_static("b"));
        let before = h.clone();
        crate::request::headers::compact(&mut h);
        assert_eq!(h, before);
        assert!(h.get("authorization").unwrap().is_sensitive());
        let list: Vec<&[u8]> = h.get_all("x-list").iter().map(|v| v.as_bytes()).collect();
        assert_eq!(list, [&b"a"[..], b"", b"b"]);
        // Every value now lies in one new buffer, none in `read`.
        let spans: Vec<usize> = h.values().map(|v| v.as_bytes().as_ptr() as usize).collect();
        let lo = *spans.iter().min().unwrap();
        let hi = h
            .values()
            .map(|v| v.as_bytes().as_ptr() as usize + v.len())
            .max()
            .unwrap();
        assert_eq!(hi - lo, "text/plainsecretab".len());
        assert!(
            !spans
                .iter()
                .any(|p| (read.as_ptr() as usize..read.as_ptr() as usize + read.len()).contains(p))
        );
    }

    #[test]
    fn numbers_read_as_their_decimal_form() {
        // Repeats and alternations too: the last value above 100 is reused.
        for n in (0..=120).chain([999, 999, 1_000, 999, 15_000, 15_000, u64::MAX, 15_000]) {
            assert_eq!(number(n).to_str().ok(), Some(n.to_string().as_str()), "{n}");
        }
    }
}
