//! Route matching: arbitrary requests against route tables with every matcher
//! kind. The indexed lookup must pick the same route as testing every route in
//! order (`select_route_linear`), and nothing may panic.
//!
//! Input: text lines `host`, `method`, `path`, then `name: value` headers.
#![no_main]

use courier_config::listener::hcm::RouteSpecifier;
use courier_config::route::RouteConfig;
use courier_config::route::route_match::RouteRequest;
use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

struct Req<'a> {
    host: &'a str,
    method: &'a str,
    path: &'a str,
    headers: Vec<(String, &'a str)>,
}

impl RouteRequest for Req<'_> {
    fn path(&self) -> &str {
        self.path
    }
    fn method(&self) -> &str {
        self.method
    }
    fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        match name {
            ":authority" | "host" => return Some(Cow::Borrowed(self.host)),
            ":method" => return Some(Cow::Borrowed(self.method)),
            ":path" => return Some(Cow::Borrowed(self.path)),
            ":scheme" => return Some(Cow::Borrowed("http")),
            _ => {}
        }
        let mut values = self
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| *v);
        let first = values.next()?;
        let rest: Vec<&str> = values.collect();
        if rest.is_empty() {
            Some(Cow::Borrowed(first))
        } else {
            Some(Cow::Owned(
                std::iter::once(first)
                    .chain(rest)
                    .collect::<Vec<_>>()
                    .join(","),
            ))
        }
    }
    fn any_header_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> Option<bool> {
        let mut seen = false;
        for (n, v) in &self.headers {
            if n == name {
                seen = true;
                if test(v) {
                    return Some(true);
                }
            }
        }
        if seen {
            Some(false)
        } else {
            self.header(name).map(|v| test(&v))
        }
    }
}

fn tables() -> &'static Vec<Arc<RouteConfig>> {
    static TABLES: OnceLock<Vec<Arc<RouteConfig>>> = OnceLock::new();
    TABLES.get_or_init(|| {
        [
            include_str!("../routes.yaml"),
            include_str!("../http1.yaml"),
        ]
        .iter()
        .map(|yaml| {
            let b = courier_config::bootstrap_from_str(yaml, courier_config::load::Format::Yaml)
                .expect("the fuzz route tables load");
            let fc = b.listeners[0]
                .all_filter_chains()
                .next()
                .expect("a filter chain");
            match fc.hcm().map(|h| &h.route_specifier) {
                Some(RouteSpecifier::Inline(rc)) => Arc::clone(rc),
                _ => panic!("inline routes expected"),
            }
        })
        .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let (Some(host), Some(method), Some(path)) = (lines.next(), lines.next(), lines.next()) else {
        return;
    };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim()))
        .collect();
    let req = Req {
        host,
        method,
        path,
        headers,
    };
    for rc in tables() {
        let Some(vh) = rc.select_virtual_host(host) else {
            continue;
        };
        let indexed = vh.select_route(&req).map(|r| r as *const _);
        let linear = vh.select_route_linear(&req).map(|r| r as *const _);
        assert_eq!(
            indexed, linear,
            "index and linear scan disagree for {host:?} {method} {path:?}"
        );
    }
});
