//! Rate-limit actions (`envoy.config.route.v3.RateLimit`): how a request becomes rate-limit
//! descriptors. Shared by the local rate limit filter (its own `rate_limits`) and, later,
//! the global one. Evaluated by `courier-filters` against a request.
//!
//! Served actions: `destination_cluster`, `request_headers`,
//! `remote_address`, `generic_key`, `header_value_match`, `query_parameter_value_match`,
//! `masked_remote_address`, `remote_address_match`. The others (`source_cluster`, metadata,
//! extensions, `query_parameters`) are refused by the support table; so are `stage`, `disable_key`,
//! `limit` on a `RateLimit`. `hits_addend` is served in the global filter's own
//! `rate_limits` and its per-route ones (a number, or a format of one
//! `%DYNAMIC_METADATA(...)%` or a literal), `apply_on_stream_done` in the per-route ones
//! only; both are refused elsewhere (the local filter, routes and virtual hosts).
//!
//! `descriptor_value` is a literal for every action but `remote_address_match`: Envoy 1.40
//! parses it as a format string only when the runtime flag
//! `enable_formatter_for_ratelimit_action_descriptor_value` is on, and it is off by default.
//! `remote_address_match` always formats its value; courier serves the address commands
//! of that format (others are refused at the field).

use crate::ctx::Ctx;
use crate::matcher::{self, Cidr, HeaderMatcher};
use crate::path::Path;
use crate::route::QueryParameterMatcher;
use envoy_types::pb::envoy::config::route::v3 as pb;

/// One `RateLimit`: its actions, all of which must produce an entry for the descriptor to
/// be produced.
#[derive(Debug, Clone)]
pub struct RateLimitPolicy {
    /// The actions, in order.
    pub actions: Vec<Action>,
    /// `stage` (route and virtual host policies): only filters of this stage use it.
    pub stage: u32,
    /// `disable_key` (route and virtual host policies): the local filter skips a policy
    /// that has one; the global one reads it as a runtime key, on by default.
    pub disable_key: String,
    /// `hits_addend`: what the descriptor adds to its limit (the global filter).
    pub hits_addend: Option<HitsAddend>,
    /// `apply_on_stream_done`: the descriptor goes to the rate limit service when the
    /// stream is done, not when the request starts (the global filter's per-route config).
    pub apply_on_stream_done: bool,
}

/// A `RateLimit.HitsAddend`.
#[derive(Debug, Clone, PartialEq)]
pub enum HitsAddend {
    /// `number`.
    Number(u64),
    /// `format`'s one substitution: its value must be a number (or a string of one) in
    /// `[0, 1e9]`, else the descriptor is dropped.
    Format(HitsAddendFormat),
}

/// The substitution of a `hits_addend` format courier serves.
#[derive(Debug, Clone, PartialEq)]
pub enum HitsAddendFormat {
    /// A format without commands (`%%`): its text, which is never a number.
    Literal(String),
    /// `%DYNAMIC_METADATA(namespace:key:...)%`.
    DynamicMetadata {
        /// The namespace.
        namespace: String,
        /// Keys into the namespace's object.
        path: Vec<String>,
    },
}

/// Envoy's bound on a descriptor's `hits_addend`.
pub const MAX_HITS_ADDEND: u64 = 1_000_000_000;

/// Which of `hits_addend` and `apply_on_stream_done` a `rate_limits` list may use.
#[derive(Debug, Clone, Copy)]
pub struct StreamFields {
    /// `hits_addend` is served.
    pub hits_addend: bool,
    /// `apply_on_stream_done` is served.
    pub apply_on_stream_done: bool,
    /// Where the list is, for refusals ("a route's rate_limits").
    pub place: &'static str,
}

impl StreamFields {
    /// Neither field served, in the list at `place`.
    pub const fn none(place: &'static str) -> Self {
        Self {
            hits_addend: false,
            apply_on_stream_done: false,
            place,
        }
    }
}

/// One descriptor-entry producer.
#[derive(Debug, Clone)]
pub enum Action {
    /// `("destination_cluster", <route cluster>)`.
    DestinationCluster,
    /// `(<descriptor_key>, <header value>)`; a missing header fails the action unless
    /// `skip_if_absent` (then the action adds nothing).
    RequestHeaders {
        /// Lower-cased header name.
        header_name: String,
        /// The entry's key.
        descriptor_key: String,
        /// A missing header skips this entry instead of the whole descriptor.
        skip_if_absent: bool,
    },
    /// `("remote_address", <trusted client address>)`.
    RemoteAddress,
    /// `(<descriptor_key or "generic_key">, <descriptor_value>)`.
    GenericKey {
        /// The entry's key.
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
    },
    /// `(<descriptor_key or "header_match">, <descriptor_value>)` when the headers match
    /// (or do not, with `expect_match: false`).
    HeaderValueMatch {
        /// The entry's key.
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
        /// Whether the entry is added on a match (`true`) or a mismatch.
        expect_match: bool,
        /// All must match.
        headers: Vec<HeaderMatcher>,
    },
    /// `(<descriptor_key or "query_match">, <descriptor_value>)` when the query parameters
    /// match (or do not).
    QueryParameterValueMatch {
        /// The entry's key.
        descriptor_key: String,
        /// The entry's value.
        descriptor_value: String,
        /// Whether the entry is added on a match (`true`) or a mismatch.
        expect_match: bool,
        /// All must match.
        query_parameters: Vec<QueryParameterMatcher>,
    },
    /// `("masked_remote_address", "<address masked>/<len>")`.
    MaskedRemoteAddress {
        /// IPv4 prefix length (default 32).
        v4_prefix_len: u8,
        /// IPv6 prefix length (default 128).
        v6_prefix_len: u8,
    },
    /// `(<descriptor_key or "remote_address_match">, <formatted value>)` when the trusted
    /// client address is in `ranges` (not in them, with `invert`).
    RemoteAddressMatch {
        /// The entry's key.
        descriptor_key: String,
        /// The value's format.
        descriptor_value: Vec<FormatPart>,
        /// Used when the formatted value is empty.
        default_value: String,
        /// The address ranges; `None` when no `address_matcher` (every address matches).
        ranges: Option<(Vec<Cidr>, bool)>,
    },
}

/// A piece of a `remote_address_match` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatPart {
    /// Literal text.
    Text(String),
    /// `%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%`: the trusted client address.
    RemoteAddressWithoutPort,
    /// `%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%`: the socket peer's address.
    DirectRemoteAddressWithoutPort,
}

/// Translates a filter's own `rate_limits` (`path` is the list's path), where Envoy does
/// not support `stage` and `disable_key`; `served` says which stream fields the consumer
/// implements (the others are refused).
pub fn policies(
    list: &[pb::RateLimit],
    path: &Path<'_>,
    served: StreamFields,
    ctx: &mut Ctx,
) -> Option<Vec<RateLimitPolicy>> {
    let mut ok = true;
    for (i, rl) in list.iter().enumerate() {
        if rl.stage.is_some() {
            ctx.unsupported(
                &path.index(i).field("stage"),
                "stage in a filter's rate_limits",
            );
            ok = false;
        }
        if !rl.disable_key.is_empty() {
            ctx.unsupported(
                &path.index(i).field("disable_key"),
                "disable_key in a filter's rate_limits",
            );
            ok = false;
        }
    }
    let out = translate(list, path, served, ctx)?;
    ok.then_some(out)
}

/// Translates a route's or virtual host's `rate_limits`. Their `hits_addend` and
/// `apply_on_stream_done` are refused: the local filter reads these lists too and does
/// not serve them.
pub fn route_policies(
    list: &[pb::RateLimit],
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<Vec<RateLimitPolicy>> {
    let served = StreamFields::none("a route's or virtual host's rate_limits");
    translate(list, path, served, ctx)
}

fn translate(
    list: &[pb::RateLimit],
    path: &Path<'_>,
    served: StreamFields,
    ctx: &mut Ctx,
) -> Option<Vec<RateLimitPolicy>> {
    let mut out = Vec::with_capacity(list.len());
    let mut ok = true;
    for (i, rl) in list.iter().enumerate() {
        let p = path.index(i);
        if rl.actions.is_empty() {
            ctx.error(&p.field("actions"), "must have at least one item");
            ok = false;
            continue;
        }
        let ap = p.field("actions");
        let mut actions = Vec::with_capacity(rl.actions.len());
        for (j, a) in rl.actions.iter().enumerate() {
            match action(a, &ap.index(j), ctx) {
                Some(a) => actions.push(a),
                None => ok = false,
            }
        }
        let stage = rl.stage.as_ref().map_or(0, |s| s.value);
        if stage > 10 {
            ctx.error(&p.field("stage"), "must be at most 10");
            ok = false;
        }
        let hits_addend = match rl.hits_addend.as_ref() {
            None => None,
            Some(_) if !served.hits_addend => {
                ctx.unsupported(
                    &p.field("hits_addend"),
                    format!("hits_addend in {}", served.place),
                );
                ok = false;
                None
            }
            Some(h) => match hits_addend(h, &p.field("hits_addend"), ctx) {
                Some(h) => Some(h),
                None => {
                    ok = false;
                    None
                }
            },
        };
        if rl.apply_on_stream_done && !served.apply_on_stream_done {
            ctx.unsupported(
                &p.field("apply_on_stream_done"),
                format!("apply_on_stream_done in {}", served.place),
            );
            ok = false;
        }
        out.push(RateLimitPolicy {
            actions,
            stage,
            disable_key: rl.disable_key.clone(),
            hits_addend,
            apply_on_stream_done: rl.apply_on_stream_done,
        });
    }
    ok.then_some(out)
}

/// Translates a `HitsAddend` as Envoy's `RateLimitPolicy` does: exactly one of `number`
/// and `format`; a format of exactly one substitution.
fn hits_addend(
    h: &pb::rate_limit::HitsAddend,
    path: &Path<'_>,
    ctx: &mut Ctx,
) -> Option<HitsAddend> {
    const ONE_OF: &str = "hits_addend must contain either a format or a number";
    if h.format.is_empty() {
        let Some(n) = h.number.as_ref() else {
            ctx.error(path, ONE_OF);
            return None;
        };
        if n.value > MAX_HITS_ADDEND {
            ctx.error(
                &path.field("number"),
                format!("must be at most {MAX_HITS_ADDEND}"),
            );
            return None;
        }
        return Some(HitsAddend::Number(n.value));
    }
    let fp = path.field("format");
    if h.number.is_some() {
        ctx.error(path, ONE_OF);
        return None;
    }
    // The proto's rules, checked before the format is parsed.
    for (ok, rule) in [
        (h.format.starts_with('%'), "prefix"),
        (h.format.ends_with('%'), "suffix"),
    ] {
        if !ok {
            ctx.error(&fp, format!("value does not have {rule} \"%\""));
            return None;
        }
    }
    let parsed = match crate::format::parse(&h.format) {
        Ok(f) => f,
        Err(e) => {
            ctx.error(&fp, e);
            return None;
        }
    };
    let [part] = parsed.parts.as_slice() else {
        ctx.error(
            &fp,
            "hits_addend format must contain exactly one substitution",
        );
        return None;
    };
    use crate::format::{Command, Part};
    Some(HitsAddend::Format(match part {
        Part::Literal(text) => HitsAddendFormat::Literal(text.clone()),
        Part::Command(Command::DynamicMetadata {
            namespace,
            path,
            max_length: None,
        }) => HitsAddendFormat::DynamicMetadata {
            namespace: namespace.clone(),
            path: path.clone(),
        },
        Part::Command(_) => {
            ctx.unsupported(
                &fp,
                format!(
                    "hits_addend format \"{}\" (only %DYNAMIC_METADATA(...)% without a length is served)",
                    h.format
                ),
            );
            return None;
        }
    }))
}

fn or_default(key: &str, default: &str) -> String {
    if key.is_empty() {
        default.to_string()
    } else {
        key.to_string()
    }
}

fn action(a: &pb::rate_limit::Action, path: &Path<'_>, ctx: &mut Ctx) -> Option<Action> {
    use pb::rate_limit::action::ActionSpecifier as S;
    Some(match a.action_specifier.as_ref() {
        Some(S::DestinationCluster(_)) => Action::DestinationCluster,
        Some(S::RequestHeaders(h)) => {
            let p = path.field("request_headers");
            if h.header_name.is_empty() {
                ctx.error(&p.field("header_name"), "must not be empty");
                return None;
            }
            if h.descriptor_key.is_empty() {
                ctx.error(&p.field("descriptor_key"), "must not be empty");
                return None;
            }
            Action::RequestHeaders {
                header_name: h.header_name.to_ascii_lowercase(),
                descriptor_key: h.descriptor_key.clone(),
                skip_if_absent: h.skip_if_absent,
            }
        }
        Some(S::RemoteAddress(_)) => Action::RemoteAddress,
        Some(S::GenericKey(g)) => {
            let p = path.field("generic_key");
            if g.descriptor_value.is_empty() {
                ctx.error(&p.field("descriptor_value"), "must not be empty");
                return None;
            }
            if !g.default_value.is_empty() {
                // Only meaningful with the formatter runtime flag, which is off.
                ctx.unsupported(&p.field("default_value"), "generic_key default_value");
                return None;
            }
            Action::GenericKey {
                descriptor_key: or_default(&g.descriptor_key, "generic_key"),
                descriptor_value: g.descriptor_value.clone(),
            }
        }
        Some(S::HeaderValueMatch(h)) => {
            let p = path.field("header_value_match");
            if h.descriptor_value.is_empty() {
                ctx.error(&p.field("descriptor_value"), "must not be empty");
                return None;
            }
            if h.headers.is_empty() {
                ctx.error(&p.field("headers"), "must have at least one item");
                return None;
            }
            if !h.default_value.is_empty() {
                ctx.unsupported(
                    &p.field("default_value"),
                    "header_value_match default_value",
                );
                return None;
            }
            let hp = p.field("headers");
            let mut headers = Vec::with_capacity(h.headers.len());
            for (i, m) in h.headers.iter().enumerate() {
                headers.push(matcher::header_matcher(m, &hp.index(i), ctx)?);
            }
            Action::HeaderValueMatch {
                descriptor_key: or_default(&h.descriptor_key, "header_match"),
                descriptor_value: h.descriptor_value.clone(),
                expect_match: h.expect_match.as_ref().is_none_or(|b| b.value),
                headers,
            }
        }
        Some(S::QueryParameterValueMatch(q)) => {
            let p = path.field("query_parameter_value_match");
            if q.descriptor_value.is_empty() {
                ctx.error(&p.field("descriptor_value"), "must not be empty");
                return None;
            }
            if q.query_parameters.is_empty() {
                ctx.error(&p.field("query_parameters"), "must have at least one item");
                return None;
            }
            if !q.default_value.is_empty() {
                ctx.unsupported(
                    &p.field("default_value"),
                    "query_parameter_value_match default_value",
                );
                return None;
            }
            let qp = p.field("query_parameters");
            let mut query_parameters = Vec::with_capacity(q.query_parameters.len());
            for (i, m) in q.query_parameters.iter().enumerate() {
                query_parameters.push(crate::route::query_parameter_matcher(m, &qp.index(i), ctx)?);
            }
            Action::QueryParameterValueMatch {
                descriptor_key: or_default(&q.descriptor_key, "query_match"),
                descriptor_value: q.descriptor_value.clone(),
                expect_match: q.expect_match.as_ref().is_none_or(|b| b.value),
                query_parameters,
            }
        }
        Some(S::MaskedRemoteAddress(m)) => {
            let p = path.field("masked_remote_address");
            let v4 = m.v4_prefix_mask_len.as_ref().map_or(32, |v| v.value);
            let v6 = m.v6_prefix_mask_len.as_ref().map_or(128, |v| v.value);
            if v4 > 32 {
                ctx.error(&p.field("v4_prefix_mask_len"), "must be at most 32");
                return None;
            }
            if v6 > 128 {
                ctx.error(&p.field("v6_prefix_mask_len"), "must be at most 128");
                return None;
            }
            Action::MaskedRemoteAddress {
                v4_prefix_len: v4 as u8,
                v6_prefix_len: v6 as u8,
            }
        }
        Some(S::RemoteAddressMatch(r)) => {
            let p = path.field("remote_address_match");
            let descriptor_value = format(&r.descriptor_value, &p.field("descriptor_value"), ctx)?;
            let ranges = match r.address_matcher.as_ref() {
                None => None,
                Some(am) => {
                    let amp = p.field("address_matcher");
                    let rp = amp.field("ranges");
                    let mut cidrs = Vec::with_capacity(am.ranges.len());
                    for (i, c) in am.ranges.iter().enumerate() {
                        // The matcher's ranges are `xds.core.v3.CidrRange`, the same fields.
                        let c = envoy_types::pb::envoy::config::core::v3::CidrRange {
                            address_prefix: c.address_prefix.clone(),
                            prefix_len: c.prefix_len,
                        };
                        cidrs.push(matcher::cidr(&c, &rp.index(i), ctx)?);
                    }
                    Some((cidrs, am.invert_match))
                }
            };
            Action::RemoteAddressMatch {
                descriptor_key: or_default(&r.descriptor_key, "remote_address_match"),
                descriptor_value,
                default_value: r.default_value.clone(),
                ranges,
            }
        }
        // Refused by the support table.
        Some(_) => return None,
        None => {
            ctx.error(path, "one action is required");
            return None;
        }
    })
}

/// Parses a format string of address commands (`%%` is a literal `%`).
fn format(s: &str, path: &Path<'_>, ctx: &mut Ctx) -> Option<Vec<FormatPart>> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        text.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('%') {
            text.push('%');
            rest = stripped;
            continue;
        }
        let Some(end) = after.find('%') else {
            ctx.error(path, format!("unterminated command in \"{s}\""));
            return None;
        };
        let part = match &after[..end] {
            "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT" => FormatPart::RemoteAddressWithoutPort,
            "DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT" => {
                FormatPart::DirectRemoteAddressWithoutPort
            }
            other => {
                ctx.unsupported(path, format!("format command %{other}%"));
                return None;
            }
        };
        if !text.is_empty() {
            parts.push(FormatPart::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
        rest = &after[end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(FormatPart::Text(text));
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_address_commands_and_literals() {
        let mut ctx = Ctx::new();
        let f = format(
            "ip=%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%%%",
            &Path::ROOT,
            &mut ctx,
        );
        assert_eq!(
            f,
            Some(vec![
                FormatPart::Text("ip=".into()),
                FormatPart::RemoteAddressWithoutPort,
                FormatPart::Text("%".into()),
            ])
        );
        assert!(format("%REQ(x)%", &Path::ROOT, &mut ctx).is_none());
        assert!(format("%OPEN", &Path::ROOT, &mut ctx).is_none());
    }
}
