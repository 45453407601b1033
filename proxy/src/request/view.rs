//! A request head as the route matcher sees it ([`RouteRequest`]): the
//! connection manager picks the route with it, the router the virtual cluster.

use super::conn::authority_of;
use courier_config::route::RouteRequest;
use http::{HeaderMap, Request, Uri};
use std::borrow::Cow;

/// A request head as the route matcher sees it.
pub struct View<'a> {
    /// The URI (path, query, and the authority of absolute forms).
    pub uri: &'a Uri,
    /// The method.
    pub method: &'a http::Method,
    /// The headers.
    pub headers: &'a HeaderMap,
}

impl<'a> View<'a> {
    /// The head of `req`.
    pub fn of<B>(req: &'a Request<B>) -> Self {
        Self {
            uri: req.uri(),
            method: req.method(),
            headers: req.headers(),
        }
    }

    /// The head of request parts.
    pub fn parts(head: &'a http::request::Parts) -> Self {
        Self {
            uri: &head.uri,
            method: &head.method,
            headers: &head.headers,
        }
    }
}

impl RouteRequest for View<'_> {
    fn path(&self) -> &str {
        self.uri.path_and_query().map_or("/", |pq| pq.as_str())
    }

    fn method(&self) -> &str {
        self.method.as_str()
    }

    fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        match name {
            ":authority" => return authority_of(self.uri, self.headers).map(Cow::Borrowed),
            ":path" => return Some(Cow::Borrowed(self.path())),
            ":method" => return Some(Cow::Borrowed(self.method())),
            ":scheme" => return Some(Cow::Borrowed(self.uri.scheme_str().unwrap_or("http"))),
            _ => {}
        }
        let mut values = self.headers.get_all(name).iter();
        let first = values.next()?.to_str().ok()?;
        match values.next() {
            None => Some(Cow::Borrowed(first)),
            Some(second) => {
                // Repeated headers are matched joined with ",", as Envoy does.
                let mut joined = format!("{first},{}", second.to_str().ok()?);
                for v in values {
                    joined.push(',');
                    joined.push_str(v.to_str().ok()?);
                }
                Some(Cow::Owned(joined))
            }
        }
    }

    fn any_header_value(&self, name: &str, test: &mut dyn FnMut(&str) -> bool) -> Option<bool> {
        if name.starts_with(':') {
            return self.header(name).map(|v| test(&v));
        }
        let mut values = self.headers.get_all(name).iter().peekable();
        values.peek()?;
        // Values that are not visible ASCII (rare; `to_str` refuses them) are skipped.
        Some(values.any(|v| v.to_str().is_ok_and(&mut *test)))
    }
}
