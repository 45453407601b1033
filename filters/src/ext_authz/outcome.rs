//! What an authorization answer means for the request (envoy-reference 3.2 steps 6-10),
//! whichever service gave it, and applying an OK answer's mutations.

use crate::chain::LocalReply;
use crate::request::RequestState;
use http::header::{HeaderName, HeaderValue};
use http::uri::{PathAndQuery, Uri};
use serde_json::{Map, Value};

/// How a header from the authorization server changes the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Replace every value (or add).
    Set,
    /// Join to the existing value with `,`; nothing when absent (`append: true`).
    AppendExisting,
    /// Add another value (HTTP `allowed_upstream_headers_to_append`).
    Add,
}

/// How a header from the authorization server changes the client's response (Envoy's
/// `response_headers_to_add`, `_to_set`, `_to_add_if_absent`, `_to_overwrite_if_exists`,
/// applied in that order when the response passes the filter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ResponseMutation {
    /// Add another value (`append: true`, or no `append` and `APPEND_IF_EXISTS_OR_ADD`).
    Add,
    /// Replace every value, or add (`append: false`, or `OVERWRITE_IF_EXISTS_OR_ADD`).
    Set,
    /// Add only when the response has none (`ADD_IF_ABSENT`).
    AddIfAbsent,
    /// Replace only when the response has one (`OVERWRITE_IF_EXISTS`).
    OverwriteIfExists,
}

/// The response header actions of OK answers, by ext_authz filter name, kept in the
/// request's `filter_state` until the response comes.
#[derive(Debug, Clone, Default)]
pub struct PendingResponseHeaders(pub Vec<(String, ResponseHeaders)>);

/// The response header actions of one OK answer.
#[derive(Debug, Clone, Default)]
pub struct ResponseHeaders(pub Vec<(ResponseMutation, HeaderName, HeaderValue)>);

impl ResponseHeaders {
    /// Applies the actions to `headers`, in Envoy's order (all adds, then sets, ...).
    pub fn apply(&self, headers: &mut http::HeaderMap) {
        let mut ops: Vec<_> = self.0.iter().collect();
        // Stable: the actions of one kind keep the server's order.
        ops.sort_by_key(|(m, _, _)| *m);
        for (m, name, value) in ops {
            match m {
                ResponseMutation::Add => {
                    headers.append(name.clone(), value.clone());
                }
                ResponseMutation::Set => {
                    headers.insert(name.clone(), value.clone());
                }
                ResponseMutation::AddIfAbsent if !headers.contains_key(name) => {
                    headers.append(name.clone(), value.clone());
                }
                ResponseMutation::OverwriteIfExists if headers.contains_key(name) => {
                    headers.insert(name.clone(), value.clone());
                }
                ResponseMutation::AddIfAbsent | ResponseMutation::OverwriteIfExists => {}
            }
        }
    }
}

/// An OK answer's changes.
#[derive(Debug, Default)]
pub struct Allow {
    /// Request header changes, in order.
    pub headers: Vec<(Mutation, HeaderName, HeaderValue)>,
    /// Request headers to remove.
    pub remove: Vec<String>,
    /// Query parameters to set.
    pub query_set: Vec<(String, String)>,
    /// Query parameters to remove.
    pub query_remove: Vec<String>,
    /// Changes to the client's response headers.
    pub response_headers: Vec<(ResponseMutation, HeaderName, HeaderValue)>,
    /// Dynamic metadata for later filters and access logs.
    pub metadata: Option<Map<String, Value>>,
}

/// What the authorization service answered.
#[derive(Debug)]
pub enum Outcome {
    /// Go on, with these changes.
    Ok(Allow),
    /// Answer the client with this.
    Denied(LocalReply),
    /// No usable answer (transport failure, timeout, 5xx, a non-OK gRPC status); an
    /// `error_response` carries its own reply.
    Error(Option<LocalReply>),
}

/// Whether `name` may be changed by the authorization server: never pseudo-headers.
fn mutable(name: &str) -> bool {
    !name.starts_with(':')
}

/// Applies `allow` to the request (its response header actions are the filter's to keep);
/// returns whether anything changed.
pub fn apply(req: &mut RequestState<'_>, allow: &Allow) -> bool {
    let mut changed = false;
    let headers = &mut req.head.headers;
    for (m, name, value) in &allow.headers {
        let present = headers.contains_key(name);
        match m {
            Mutation::Set => {
                headers.insert(name.clone(), value.clone());
            }
            Mutation::Add => {
                headers.append(name.clone(), value.clone());
            }
            Mutation::AppendExisting if present => {
                let mut joined = headers
                    .get_all(name)
                    .iter()
                    .map(|v| v.as_bytes())
                    .collect::<Vec<_>>()
                    .join(&b","[..]);
                joined.push(b',');
                joined.extend_from_slice(value.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&joined) {
                    headers.insert(name.clone(), v);
                }
            }
            Mutation::AppendExisting => continue,
        }
        changed = true;
    }
    for name in &allow.remove {
        let name = name.to_ascii_lowercase();
        if mutable(&name) && name != "host" && headers.remove(name.as_str()).is_some() {
            changed = true;
        }
    }
    if !allow.query_set.is_empty() || !allow.query_remove.is_empty() {
        changed |= rewrite_query(req, &allow.query_set, &allow.query_remove);
    }
    if let Some(md) = &allow.metadata {
        req.merge_metadata(super::FILTER_NAME, md.clone());
    }
    changed
}

/// Sets and removes query parameters on `:path` (Envoy's `QueryParamsMulti`: a set
/// replaces every value of the key; the query is rebuilt in key order).
fn rewrite_query(req: &mut RequestState<'_>, set: &[(String, String)], remove: &[String]) -> bool {
    let (path, query) = match req.path().split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (req.path().to_string(), String::new()),
    };
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect();
    for (k, v) in set {
        match params.iter().position(|(pk, _)| pk == k) {
            Some(i) => {
                params[i].1 = v.clone();
                let mut seen = 0;
                params.retain(|(pk, _)| {
                    if pk == k {
                        seen += 1;
                        seen == 1
                    } else {
                        true
                    }
                });
            }
            None => params.push((k.clone(), v.clone())),
        }
    }
    params.retain(|(k, _)| !remove.contains(k));
    // Stable: the values of one key keep their order.
    params.sort_by(|a, b| a.0.cmp(&b.0));
    let query = params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let new = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    if new == req.path() {
        return false;
    }
    let Ok(pq) = PathAndQuery::try_from(new) else {
        return false;
    };
    let mut parts = req.head.uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    match Uri::from_parts(parts) {
        Ok(u) => {
            req.head.uri = u;
            true
        }
        Err(_) => false,
    }
}
