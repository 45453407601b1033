//! The HTTP authorization service: the check request Envoy sends and how its answer is
//! read (envoy-reference 3.2 step 7).

use super::outcome::{Allow, Mutation, Outcome, ResponseMutation};
use crate::chain::LocalReply;
use crate::request::RequestState;
use bytes::Bytes;
use courier_config::filters::ext_authz::{ExtAuthz, HttpService};
use courier_config::matcher::StringMatcher;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};

fn any(list: Option<&Vec<StringMatcher>>, name: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|m| m.matches(name)))
}

/// The check request for `req`: its method, `path_prefix` + path, authority,
/// `authorization` and the allowed headers, `headers_to_add`, and the body if buffered.
pub fn request(
    req: &RequestState<'_>,
    cfg: &ExtAuthz,
    svc: &HttpService,
    body: Option<Bytes>,
) -> Result<Request<Bytes>, String> {
    let allowed = cfg
        .allowed_headers
        .as_ref()
        .or(svc.authorization_request.allowed_headers.as_ref());
    let path = format!("{}{}", svc.path_prefix, req.path());
    let mut b = Request::builder()
        .method(req.head.method.clone())
        .uri(path.as_str())
        .header(header::HOST, req.authority());
    for (name, value) in &req.head.headers {
        let n = name.as_str();
        if n == "host" || n == "content-length" || n == "transfer-encoding" {
            continue;
        }
        if (n == "authorization" || any(allowed, n)) && !any(cfg.disallowed_headers.as_ref(), n) {
            b = b.header(name, value);
        }
    }
    for (k, v) in &svc.authorization_request.headers_to_add {
        b = b.header(k.as_str(), v.as_str());
    }
    let body = body.unwrap_or_default();
    b = b.header(header::CONTENT_LENGTH, body.len());
    b.body(body).map_err(|e| e.to_string())
}

fn matched(
    headers: &HeaderMap,
    list: Option<&Vec<StringMatcher>>,
) -> Vec<(HeaderName, HeaderValue)> {
    headers
        .iter()
        .filter(|(n, _)| any(list, n.as_str()))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// Response headers that are the connection's or the reply's own, never passed on.
fn hop(n: &str) -> bool {
    matches!(
        n,
        "host" | "content-length" | "transfer-encoding" | "connection" | "keep-alive" | "date"
    )
}

/// What the service's answer means: 200 allows, a 5xx is an error, anything else denies.
pub fn outcome(resp: &Response<Bytes>, svc: &HttpService) -> Outcome {
    let status = resp.status();
    let r = &svc.authorization_response;
    if status.is_server_error() {
        return Outcome::Error(None);
    }
    if status == StatusCode::OK {
        let mut allow = Allow::default();
        for (n, v) in matched(resp.headers(), r.allowed_upstream_headers.as_ref()) {
            allow.headers.push((Mutation::Set, n, v));
        }
        for (n, v) in matched(
            resp.headers(),
            r.allowed_upstream_headers_to_append.as_ref(),
        ) {
            allow.headers.push((Mutation::Add, n, v));
        }
        if let Some(v) = resp
            .headers()
            .get("x-envoy-auth-headers-to-remove")
            .and_then(|v| v.to_str().ok())
        {
            allow.remove = v
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
        allow.response_headers =
            matched(resp.headers(), r.allowed_client_headers_on_success.as_ref())
                .into_iter()
                .map(|(n, v)| (ResponseMutation::Add, n, v))
                .collect();
        return Outcome::Ok(allow);
    }
    let mut headers = HeaderMap::new();
    for (n, v) in resp.headers() {
        let name = n.as_str();
        let pass = match &r.allowed_client_headers {
            None => !hop(name),
            Some(l) => {
                !hop(name)
                    && (l.iter().any(|m| m.matches(name))
                        || name == "www-authenticate"
                        || name == "location")
            }
        };
        if pass {
            headers.append(n.clone(), v.clone());
        }
    }
    Outcome::Denied(LocalReply {
        status,
        body: resp.body().clone(),
        headers,
        details: "ext_authz_denied".into(),
        response_flag: None,
        grpc_status: None,
    })
}
