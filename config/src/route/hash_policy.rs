//! `RouteAction.hash_policy`: what a request's hash is made of, for the
//! consistent-hashing balancers (RING_HASH, MAGLEV) and
//! `weighted_clusters.use_hash_policy`.

use super::rewrite::{self, RegexRewrite};
use crate::ctx::Ctx;
use crate::path::Path;
use envoy_types::pb::envoy::config::route::v3 as pb;

/// One hash policy; a request's hash combines those that produce one, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashPolicy {
    /// What it hashes.
    pub kind: HashKind,
    /// `terminal`: once a hash exists (from this policy or an earlier one),
    /// the later policies are skipped.
    pub terminal: bool,
}

/// What a hash policy hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKind {
    /// The values of a request header (all of its lines, sorted), each
    /// rewritten by `rewrite` first when set.
    Header {
        /// Lower-cased header name.
        name: String,
        /// `regex_rewrite`.
        rewrite: Option<RegexRewrite>,
    },
    /// A cookie's value; with `ttl`, a request without the cookie gets one
    /// generated (and a `Set-Cookie` on its response).
    Cookie(CookiePolicy),
    /// The downstream client's IP address (`connection_properties.source_ip`).
    SourceIp,
    /// The first value of a query parameter.
    QueryParameter(String),
}

/// `hash_policy.cookie`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookiePolicy {
    /// The cookie's name.
    pub name: String,
    /// `path` of a generated cookie (none when empty).
    pub path: String,
    /// `ttl` in whole seconds: when set, the cookie is generated when absent
    /// (`Max-Age` unless 0).
    pub ttl: Option<u64>,
    /// `attributes` of a generated cookie, as (name, value).
    pub attributes: Vec<(String, String)>,
}

/// Translates `hash_policy`; policies that hash nothing (a
/// `connection_properties` without `source_ip`) are left out, as Envoy does.
pub(crate) fn translate(
    list: &[pb::route_action::HashPolicy],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Vec<HashPolicy> {
    use pb::route_action::hash_policy::PolicySpecifier as S;
    let mut out = Vec::with_capacity(list.len());
    for (i, h) in list.iter().enumerate() {
        let p = path.index(i);
        let kind = match &h.policy_specifier {
            Some(S::Header(hd)) => {
                let hp = p.field("header");
                if hd.header_name.is_empty() {
                    ctx.error(&hp.field("header_name"), "must not be empty");
                    continue;
                }
                if !super::headers::valid_name_chars(&hd.header_name) {
                    ctx.error(&hp.field("header_name"), "must not contain NUL, CR or LF");
                    continue;
                }
                let rewrite = match &hd.regex_rewrite {
                    Some(r) => match rewrite::regex_rewrite(r, &hp.field("regex_rewrite"), ctx) {
                        Some(r) => Some(r),
                        None => continue,
                    },
                    None => None,
                };
                HashKind::Header {
                    name: hd.header_name.to_ascii_lowercase(),
                    rewrite,
                }
            }
            Some(S::Cookie(c)) => {
                let cp = p.field("cookie");
                if c.name.is_empty() {
                    ctx.error(&cp.field("name"), "must not be empty");
                    continue;
                }
                let ttl = match &c.ttl {
                    Some(d) if d.seconds < 0 || d.nanos < 0 => {
                        ctx.error(&cp.field("ttl"), "must not be negative");
                        continue;
                    }
                    // Envoy keeps whole seconds.
                    Some(d) => Some(d.seconds as u64),
                    None => None,
                };
                let mut attributes = Vec::with_capacity(c.attributes.len());
                for (j, a) in c.attributes.iter().enumerate() {
                    if a.name.is_empty() {
                        ctx.error(
                            &cp.field("attributes").index(j).field("name"),
                            "must not be empty",
                        );
                        continue;
                    }
                    attributes.push((a.name.clone(), a.value.clone()));
                }
                for (what, v) in [("name", &c.name), ("path", &c.path)] {
                    if !v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f)) {
                        ctx.error(&cp.field(what), "is not a valid header value");
                    }
                }
                HashKind::Cookie(CookiePolicy {
                    name: c.name.clone(),
                    path: c.path.clone(),
                    ttl,
                    attributes,
                })
            }
            Some(S::ConnectionProperties(c)) => {
                if !c.source_ip {
                    continue;
                }
                HashKind::SourceIp
            }
            Some(S::QueryParameter(q)) => {
                if q.name.is_empty() {
                    ctx.error(
                        &p.field("query_parameter").field("name"),
                        "must not be empty",
                    );
                    continue;
                }
                HashKind::QueryParameter(q.name.clone())
            }
            Some(S::FilterState(_)) => {
                // Envoy hashes a filter-state object that can hash itself;
                // no filter courier has sets one.
                ctx.unsupported(&p.field("filter_state"), "filter_state");
                continue;
            }
            None => {
                ctx.error(&p, "one of header, cookie, connection_properties, query_parameter or filter_state is required");
                continue;
            }
        };
        out.push(HashPolicy {
            kind,
            terminal: h.terminal,
        });
    }
    out
}
