//! The custom_response filter: on the response path, the first predicate of
//! the route's matcher (else the filter's) that matches the response names a
//! local response that replaces it, as Envoy's `LocalResponsePolicy` does:
//! the policy's status (else the response's), its body, `content-type:
//! text/plain` for a non-empty body, then its `response_headers_to_add`. Like
//! Envoy's reply from `encodeHeaders`, the replacement goes straight out: the
//! filters after this one on the response path do not see it.

use crate::cel_attributes::{Deciding, Response};
use crate::chain::{Decision, HttpFilter, LocalReply, ResponseHead};
use crate::request::RequestState;
use courier_config::cel::{Attributes, Value};
use courier_config::filters::PerRouteFilterConfig;
use courier_config::filters::custom_response::{CustomResponse, Input, LocalResponse, Predicate};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::sync::Arc;

/// The filter.
#[derive(Debug)]
pub struct CustomResponseFilter {
    config: Arc<CustomResponse>,
}

impl CustomResponseFilter {
    /// A filter with the HCM-level config.
    pub fn new(config: Arc<CustomResponse>) -> Self {
        Self { config }
    }
}

/// What the predicates read: the request being answered and the response.
struct Subject<'a, 'r> {
    req: &'a RequestState<'r>,
    status: StatusCode,
    headers: &'a HeaderMap,
    local: bool,
}

impl Subject<'_, '_> {
    fn value(&self, input: &Input) -> Option<String> {
        match input {
            Input::Status => Some(self.status.as_u16().to_string()),
            Input::StatusClass => Some(format!("{}xx", self.status.as_u16() / 100)),
            Input::LocalReply => Some(self.local.to_string()),
            Input::ResponseHeader(name) => joined(self.headers, name),
            Input::RequestHeader(name) => joined(&self.req.head.headers, name),
        }
    }

    fn matches(&self, p: &Predicate) -> bool {
        match p {
            Predicate::And(ps) => ps.iter().all(|p| self.matches(p)),
            Predicate::Or(ps) => ps.iter().any(|p| self.matches(p)),
            Predicate::Not(p) => !self.matches(p),
            Predicate::Value(input, m) => self.value(input).is_some_and(|v| m.matches(&v)),
            Predicate::Cel(e) => e.matches(self),
        }
    }
}

impl Attributes for Subject<'_, '_> {
    fn root(&self, root: &str) -> Option<Value> {
        match root {
            "response" => Some(
                Response {
                    code: self.status.as_u16(),
                    details: None,
                    headers: self.headers,
                    trailers: None,
                    size: 0,
                }
                .value(),
            ),
            other => Deciding(self.req).root(other),
        }
    }
}

/// A header's values joined with `,` (Envoy's matching input); `None` when absent.
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for v in headers.get_all(name) {
        let v = v.to_str().ok()?;
        match &mut out {
            Some(s) => {
                s.push(',');
                s.push_str(v);
            }
            None => out = Some(v.to_string()),
        }
    }
    out
}

/// The reply that replaces a response of status `status`.
fn reply(policy: &LocalResponse, status: StatusCode) -> LocalReply {
    let status = policy
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(status);
    let mut headers = HeaderMap::new();
    if !policy.body.is_empty() {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        );
    }
    for (name, value, action) in &policy.headers {
        // Checked when the config was loaded; a value that is not a header value
        // cannot reach here, and one that did would be skipped.
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            crate::header_mutation::add(&mut headers, n, v, *action);
        }
    }
    let mut r = LocalReply::new(status, policy.body.clone(), "");
    r.headers = headers;
    r
}

impl HttpFilter for CustomResponseFilter {
    fn decode_headers<'r>(
        &'r self,
        _req: &'r mut RequestState<'_>,
        _per_route: Option<&'r PerRouteFilterConfig>,
    ) -> Decision<'r> {
        Decision::Continue
    }

    fn encodes_body(&self) -> bool {
        true
    }

    fn encode_response(
        &self,
        req: &mut RequestState<'_>,
        per_route: Option<&PerRouteFilterConfig>,
        head: &mut ResponseHead<'_>,
    ) -> Option<Box<dyn crate::chain::BodyEncoder>> {
        let config = match per_route {
            Some(PerRouteFilterConfig::CustomResponse(c)) => c,
            _ => &self.config,
        };
        let subject = Subject {
            req,
            status: head.status,
            headers: head.headers,
            local: head.local,
        };
        let policy = config
            .rules
            .iter()
            .find(|(p, _)| subject.matches(p))
            .map(|(_, r)| r)
            .or(config.on_no_match.as_ref())?;
        head.replacement = Some(reply(policy, head.status));
        None
    }
}
