//! The custom_response HTTP filter (`envoy.extensions.filters.http.custom_response.v3`):
//! a unified matcher over the response (its status, headers, whether it is a
//! local reply, CEL over the request and response attributes) whose matched
//! action replaces the response with a local one (`LocalResponsePolicy`: a
//! status, a body, response headers), as Envoy Gateway emits for its
//! `responseOverride` policies. The same message is the filter's per-route
//! config, replacing the filter's matcher on that route.
//!
//! Refused with their path: `matcher_tree`, nested matchers, `keep_matching`,
//! the `RedirectPolicy` action (an internal redirect), a body format or
//! header value with command operators, `response_code_details_action`, and
//! inputs other than the response status (and its class), response and request
//! headers, the local-reply flag and CEL.

use crate::core;
use crate::ctx::Ctx;
use crate::matcher::{self, StringMatcher};
use crate::matcher_list::{self, envoy_string_matcher, typed};
use crate::path::Path;
use crate::route::AppendAction;
use envoy_types::pb::envoy::extensions::filters::http::custom_response::v3 as pb;
use envoy_types::pb::envoy::extensions::http::custom_response::local_response_policy::v3 as local_pb;
use envoy_types::pb::envoy::r#type::matcher::v3 as mpb;
use envoy_types::pb::xds::core::v3::TypedExtensionConfig;
use envoy_types::pb::xds::r#type::matcher::v3 as xpb;
use std::sync::Arc;
use xpb::matcher::matcher_list::predicate::{self, single_predicate};

/// The `LocalResponsePolicy` action's type.
const LOCAL: &str =
    "envoy.extensions.http.custom_response.local_response_policy.v3.LocalResponsePolicy";
/// The `RedirectPolicy` action's type.
const REDIRECT: &str = "envoy.extensions.http.custom_response.redirect_policy.v3.RedirectPolicy";

/// A compiled custom_response config.
#[derive(Debug, Clone, Default)]
pub struct CustomResponse {
    /// Predicates in order, each with the response it substitutes.
    pub rules: Vec<(Predicate, Arc<LocalResponse>)>,
    /// The response when no predicate matches; none: the response passes.
    pub on_no_match: Option<Arc<LocalResponse>>,
}

/// A compiled predicate.
#[derive(Debug, Clone)]
pub enum Predicate {
    /// All match.
    And(Vec<Predicate>),
    /// Any matches.
    Or(Vec<Predicate>),
    /// The inner one does not match.
    Not(Box<Predicate>),
    /// An input's value against a string matcher (an absent value never matches).
    Value(Input, StringMatcher),
    /// A CEL expression over the request's and response's attributes.
    Cel(crate::cel::Expr),
}

/// What a single predicate reads of the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The status code as text (`404`).
    Status,
    /// The status class (`4xx`).
    StatusClass,
    /// A response header (repeated ones joined with `,`).
    ResponseHeader(String),
    /// A request header (repeated ones joined with `,`).
    RequestHeader(String),
    /// `true` for a local reply, `false` for an upstream's response.
    LocalReply,
}

/// A `LocalResponsePolicy`: the response that replaces a matched one.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalResponse {
    /// The status; none: the matched response's.
    pub status: Option<u16>,
    /// The body (`body_format`'s text, else `body`); empty: none.
    pub body: bytes::Bytes,
    /// `response_headers_to_add`, applied to the new response's headers.
    pub headers: Vec<(String, String, AppendAction)>,
}

/// Translates the filter's config (also its per-route config).
pub fn translate(c: &pb::CustomResponse, path: &Path<'_>, ctx: &mut Ctx) -> Option<CustomResponse> {
    let before = ctx.error_count();
    let Some(m) = &c.custom_response_matcher else {
        // Envoy allows no matcher (route-level configs carry them): nothing matches.
        return Some(CustomResponse::default());
    };
    let mp = path.field("custom_response_matcher");
    let r = matcher_list::translate(m, &mp, ctx, single, action)?;
    (ctx.error_count() == before).then_some(CustomResponse {
        rules: r.rules,
        on_no_match: r.on_no_match,
    })
}

impl matcher_list::Tree for Predicate {
    fn all(v: Vec<Self>) -> Self {
        Predicate::And(v)
    }
    fn any(v: Vec<Self>) -> Self {
        Predicate::Or(v)
    }
    fn not(p: Self) -> Self {
        Predicate::Not(Box::new(p))
    }
}

fn action(a: &TypedExtensionConfig, path: &Path<'_>, ctx: &mut Ctx) -> Option<Arc<LocalResponse>> {
    let (any, url) = typed(a, path, ctx)?;
    let tp = path.field("typed_config");
    match url.rsplit('/').next().unwrap_or("") {
        LOCAL => {
            let p = core::unpack::<local_pb::LocalResponsePolicy>(any, &tp, ctx)?;
            local_response(&p, &tp, ctx).map(Arc::new)
        }
        REDIRECT => {
            ctx.unsupported(&tp, "the RedirectPolicy action (an internal redirect)");
            None
        }
        other => {
            ctx.unsupported(&tp, format!("custom response action {other}"));
            None
        }
    }
}

fn local_response(
    p: &local_pb::LocalResponsePolicy,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<LocalResponse> {
    let before = ctx.error_count();
    if p.response_code_details_action.is_some() {
        ctx.unsupported(path, "response_code_details_action");
    }
    let status = match p.status_code.as_ref().map(|s| s.value) {
        // Envoy's PGV rule on the field.
        Some(s @ 200..600) => u16::try_from(s).ok(),
        Some(_) => {
            ctx.error(
                &path.field("status_code.value"),
                "value must be inside range [200, 600)",
            );
            None
        }
        None => None,
    };
    let mut body = match &p.body {
        Some(ds) => bytes::Bytes::from(core::data_source(Some(ds), &path.field("body"), ctx)?),
        None => bytes::Bytes::new(),
    };
    if let Some(f) = &p.body_format {
        use crate::listener::access_log::LogFormat;
        use crate::route::action::BodyTemplate;
        let fp = path.field("body_format");
        if !f.formatters.is_empty() {
            ctx.unsupported(&fp.field("formatters"), "formatters");
            return None;
        }
        let bf = crate::route::action::body_format(f, &fp, ctx)?;
        body = match bf.template {
            BodyTemplate::Literal(b) => b,
            BodyTemplate::Format(LogFormat::Text(t)) if t.literal().is_some() => {
                bytes::Bytes::from(t.literal().unwrap_or_default())
            }
            BodyTemplate::Format(_) => {
                ctx.unsupported(
                    &fp,
                    "a body format that is not plain text (command operators, JSON)",
                );
                return None;
            }
        };
    }
    let hp = path.field("response_headers_to_add");
    let mut headers = Vec::with_capacity(p.response_headers_to_add.len());
    for (i, hvo) in p.response_headers_to_add.iter().enumerate() {
        let ip = hp.index(i);
        let Some(h) = crate::route::headers::header_to_add(hvo, &ip, ctx) else {
            continue;
        };
        match h.value.literal() {
            Some(v) if !v.is_empty() || h.keep_empty_value => {
                headers.push((h.name, v, h.action));
            }
            // Envoy drops an empty value unless `keep_empty_value`.
            Some(_) => {}
            None => ctx.unsupported(
                &ip.field("header.value"),
                "a header value with command operators",
            ),
        }
    }
    (ctx.error_count() == before).then_some(LocalResponse {
        status,
        body,
        headers,
    })
}

fn single(s: &predicate::SinglePredicate, path: &Path<'_>, ctx: &mut Ctx) -> Option<Predicate> {
    let ip = path.field("input");
    let Some(input) = &s.input else {
        ctx.error(&ip, "is required");
        return None;
    };
    let (any, url) = typed(input, &ip, ctx)?;
    let itp = ip.field("typed_config");
    let input = match url.rsplit('/').next().unwrap_or("") {
        "envoy.type.matcher.v3.HttpResponseStatusCodeMatchInput" => Some(Input::Status),
        "envoy.type.matcher.v3.HttpResponseStatusCodeClassMatchInput" => Some(Input::StatusClass),
        "envoy.type.matcher.v3.HttpResponseLocalReplyMatchInput" => Some(Input::LocalReply),
        "envoy.type.matcher.v3.HttpResponseHeaderMatchInput" => {
            let h = core::unpack::<mpb::HttpResponseHeaderMatchInput>(any, &itp, ctx)?;
            Some(Input::ResponseHeader(h.header_name.to_ascii_lowercase()))
        }
        "envoy.type.matcher.v3.HttpRequestHeaderMatchInput" => {
            let h = core::unpack::<mpb::HttpRequestHeaderMatchInput>(any, &itp, ctx)?;
            Some(Input::RequestHeader(h.header_name.to_ascii_lowercase()))
        }
        "xds.type.matcher.v3.HttpAttributesCelMatchInput" => None,
        other => {
            ctx.unsupported(&itp, format!("matcher input {other}"));
            return None;
        }
    };
    match (&s.matcher, input) {
        (Some(single_predicate::Matcher::ValueMatch(sm)), Some(input)) => {
            let vp = path.field("value_match");
            let sm = matcher::string_matcher(&envoy_string_matcher(sm, &vp, ctx)?, &vp, ctx)?;
            Some(Predicate::Value(input, sm))
        }
        (Some(single_predicate::Matcher::CustomMatch(cm)), None) => {
            let cp = path.field("custom_match");
            let (any, url) = typed(cm, &cp, ctx)?;
            let ctp = cp.field("typed_config");
            if url.rsplit('/').next() != Some("xds.type.matcher.v3.CelMatcher") {
                ctx.unsupported(&ctp, format!("input matcher {url} on a CEL input"));
                return None;
            }
            let m = core::unpack::<crate::cel::matcher_pb::CelMatcher>(any, &ctp, ctx)?;
            let ep = ctp.field("expr_match");
            let Some(e) = &m.expr_match else {
                ctx.error(&ep, "is required");
                return None;
            };
            crate::cel::Expr::from_xds(e, &ep, ctx).map(Predicate::Cel)
        }
        (Some(single_predicate::Matcher::CustomMatch(_)), Some(_)) => {
            ctx.unsupported(&path.field("custom_match"), "custom_match on this input");
            None
        }
        (Some(single_predicate::Matcher::ValueMatch(_)), None) => {
            ctx.unsupported(&path.field("value_match"), "value_match on a CEL input");
            None
        }
        (None, _) => {
            ctx.error(path, "needs value_match or custom_match");
            None
        }
    }
}

#[cfg(test)]
#[path = "custom_response_tests.rs"]
mod tests;
