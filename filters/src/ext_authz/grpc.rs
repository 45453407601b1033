//! A gRPC `CheckResponse` as an [`Outcome`].

use super::metadata::from_struct;
use super::outcome::{Allow, Mutation, Outcome, ResponseMutation};
use crate::chain::LocalReply;
use envoy_types::pb::envoy::config::core::v3::HeaderValueOption;
use envoy_types::pb::envoy::config::core::v3::header_value_option::HeaderAppendAction;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{CheckResponse, DeniedHttpResponse};
use http::StatusCode;
use http::header::{HeaderMap, HeaderName, HeaderValue};

fn name_value(h: &HeaderValueOption) -> Option<(HeaderName, HeaderValue)> {
    let hv = h.header.as_ref()?;
    let name = HeaderName::from_bytes(hv.key.to_ascii_lowercase().as_bytes()).ok()?;
    let value = if hv.value.is_empty() && !hv.raw_value.is_empty() {
        HeaderValue::from_bytes(&hv.raw_value).ok()?
    } else {
        HeaderValue::from_str(&hv.value).ok()?
    };
    Some((name, value))
}

/// Envoy 1.40 reads only the deprecated `append`: true joins to an existing value,
/// anything else (unset included, whatever `append_action` says) sets the header (seen
/// against real Envoy in the differential test).
#[allow(deprecated)] // Envoy still honours `append`.
fn mutation(h: &HeaderValueOption) -> Mutation {
    match h.append {
        Some(a) if a.value => Mutation::AppendExisting,
        _ => Mutation::Set,
    }
}

/// A `response_headers_to_add` entry: `append` when set decides (true adds, false sets),
/// else `append_action` (Envoy's `ext_authz_grpc_impl`).
#[allow(deprecated)] // Envoy still honours `append`.
fn response_mutation(h: &HeaderValueOption) -> ResponseMutation {
    if let Some(a) = h.append {
        return if a.value {
            ResponseMutation::Add
        } else {
            ResponseMutation::Set
        };
    }
    match HeaderAppendAction::try_from(h.append_action) {
        Ok(HeaderAppendAction::AddIfAbsent) => ResponseMutation::AddIfAbsent,
        Ok(HeaderAppendAction::OverwriteIfExists) => ResponseMutation::OverwriteIfExists,
        Ok(HeaderAppendAction::OverwriteIfExistsOrAdd) => ResponseMutation::Set,
        _ => ResponseMutation::Add,
    }
}

#[allow(deprecated)] // Envoy still honours `append`.
fn reply(d: &DeniedHttpResponse, details: &'static str) -> LocalReply {
    let status = d
        .status
        .as_ref()
        .and_then(|s| u16::try_from(s.code).ok())
        .filter(|c| *c > 0)
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::FORBIDDEN);
    let mut headers = HeaderMap::new();
    for h in &d.headers {
        if let Some((n, v)) = name_value(h) {
            // Repeats of a name in the list are all sent; the first replaces the reply's own.
            if matches!(h.append, Some(a) if a.value) {
                headers.append(n, v);
            } else {
                headers.insert(n, v);
            }
        }
    }
    LocalReply {
        status,
        body: d.body.clone().into(),
        headers,
        details: details.into(),
        response_flag: None,
        grpc_status: None,
    }
}

/// What a `CheckResponse` means: status OK allows, anything else denies.
pub fn outcome(resp: &CheckResponse) -> Outcome {
    let code = resp.status.as_ref().map_or(0, |s| s.code);
    if let Some(HttpResponse::ErrorResponse(e)) = &resp.http_response {
        return Outcome::Error(Some(reply(e, "ext_authz_error")));
    }
    if code != 0 {
        return Outcome::Denied(match &resp.http_response {
            Some(HttpResponse::DeniedResponse(d)) => reply(d, "ext_authz_denied"),
            _ => LocalReply::new(StatusCode::FORBIDDEN, "", "ext_authz_denied"),
        });
    }
    let mut allow = Allow {
        metadata: resp.dynamic_metadata.as_ref().map(from_struct),
        ..Allow::default()
    };
    if let Some(HttpResponse::OkResponse(ok)) = &resp.http_response {
        for h in &ok.headers {
            if let Some((n, v)) = name_value(h) {
                allow.headers.push((mutation(h), n, v));
            }
        }
        allow.remove = ok.headers_to_remove.clone();
        allow.query_set = ok
            .query_parameters_to_set
            .iter()
            .map(|q| (q.key.clone(), q.value.clone()))
            .collect();
        allow.query_remove = ok.query_parameters_to_remove.clone();
        allow.response_headers = ok
            .response_headers_to_add
            .iter()
            .filter_map(|h| name_value(h).map(|(n, v)| (response_mutation(h), n, v)))
            .collect();
    }
    Outcome::Ok(allow)
}
