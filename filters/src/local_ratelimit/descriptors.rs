//! Rate-limit actions applied to a request: the descriptors it carries (Envoy's
//! `RateLimitPolicyEntryImpl::populateDescriptors`). A descriptor is produced only when
//! every action of its `RateLimit` adds its entry (or skips it, `skip_if_absent`), and
//! only if it ends with at least one entry.

use super::limiter::Entries;
use crate::request::RequestState;
use courier_config::filters::local_ratelimit::VhRateLimits;
use courier_config::filters::rate_limit_actions::{Action, FormatPart, RateLimitPolicy};
use courier_config::route::route_match::first_query_value;
use ipnet::IpNet;
use std::net::IpAddr;

/// The descriptors `policies` make of `req`, in order.
pub fn populate(policies: &[RateLimitPolicy], req: &RequestState<'_>) -> Vec<Entries> {
    populate_each(policies.iter(), req)
}

/// The descriptors of the route's `rate_limits` of `stage` and, as `vh` says (a route's
/// `include_vh_rate_limits` makes it `Include`), its virtual host's; `skip_disabled` leaves
/// out policies with a `disable_key` (the local filter; the global one reads the key as a
/// runtime flag, on by default).
pub fn from_route(
    req: &RequestState<'_>,
    stage: u32,
    vh: VhRateLimits,
    skip_disabled: bool,
) -> Vec<Entries> {
    let Some(r) = req.route else {
        return Vec::new();
    };
    let applies = move |p: &&RateLimitPolicy| {
        p.stage == stage && (!skip_disabled || p.disable_key.is_empty())
    };
    let mut out = populate_each(r.rate_limits.iter().filter(applies), req);
    let vh = if r.include_vh_rate_limits {
        VhRateLimits::Include
    } else {
        vh
    };
    let with_vh = match vh {
        VhRateLimits::Ignore => false,
        VhRateLimits::Include => true,
        VhRateLimits::Override => r.rate_limits.is_empty(),
    };
    if with_vh {
        out.extend(populate_each(r.vh_rate_limits.iter().filter(applies), req));
    }
    out
}

fn populate_each<'p>(
    policies: impl Iterator<Item = &'p RateLimitPolicy>,
    req: &RequestState<'_>,
) -> Vec<Entries> {
    policies.filter_map(|p| entries(p, req)).collect()
}

/// The descriptor `p` makes of `req`, if its actions produce one.
pub fn entries(p: &RateLimitPolicy, req: &RequestState<'_>) -> Option<Entries> {
    let mut entries = Vec::with_capacity(p.actions.len());
    for a in &p.actions {
        if !apply(a, req, &mut entries) {
            return None;
        }
    }
    (!entries.is_empty()).then_some(entries)
}

/// The trusted client address as Envoy prints it (an IPv4-mapped IPv6 address as IPv4).
fn remote(req: &RequestState<'_>) -> IpAddr {
    match req.remote {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(req.remote, IpAddr::V4),
        v4 => v4,
    }
}

/// Adds `a`'s entry; false when the action fails (no descriptor).
fn apply(a: &Action, req: &RequestState<'_>, out: &mut Entries) -> bool {
    let mut push = |k: &str, v: String| out.push((k.to_string(), v));
    match a {
        Action::DestinationCluster => match req.route.and_then(|r| r.cluster) {
            Some(c) => push("destination_cluster", c.to_string()),
            None => return false,
        },
        Action::RequestHeaders {
            header_name,
            descriptor_key,
            skip_if_absent,
        } => match req.first_header(header_name) {
            Some(v) => push(descriptor_key, v.to_string()),
            None => return *skip_if_absent,
        },
        Action::RemoteAddress => push("remote_address", remote(req).to_string()),
        Action::GenericKey {
            descriptor_key,
            descriptor_value,
        } => push(descriptor_key, descriptor_value.clone()),
        Action::HeaderValueMatch {
            descriptor_key,
            descriptor_value,
            expect_match,
            headers,
        } => {
            let matched = headers
                .iter()
                .all(|h| h.matches(req.header(&h.name).as_deref()));
            if matched != *expect_match {
                return false;
            }
            push(descriptor_key, descriptor_value.clone());
        }
        Action::QueryParameterValueMatch {
            descriptor_key,
            descriptor_value,
            expect_match,
            query_parameters,
        } => {
            let path = req.path();
            let matched = query_parameters
                .iter()
                .all(|q| q.matches(first_query_value(path, &q.name)));
            if matched != *expect_match {
                return false;
            }
            push(descriptor_key, descriptor_value.clone());
        }
        Action::MaskedRemoteAddress {
            v4_prefix_len,
            v6_prefix_len,
        } => {
            let ip = remote(req);
            let len = if ip.is_ipv4() {
                *v4_prefix_len
            } else {
                *v6_prefix_len
            };
            match IpNet::new(ip, len) {
                Ok(net) => push("masked_remote_address", net.trunc().to_string()),
                Err(_) => return false,
            }
        }
        Action::RemoteAddressMatch {
            descriptor_key,
            descriptor_value,
            default_value,
            ranges,
        } => {
            let ip = remote(req);
            if let Some((cidrs, invert)) = ranges
                && cidrs.iter().any(|c| c.contains(ip)) == *invert
            {
                return false;
            }
            let mut value = String::new();
            for part in descriptor_value {
                match part {
                    FormatPart::Text(t) => value.push_str(t),
                    FormatPart::RemoteAddressWithoutPort => value.push_str(&ip.to_string()),
                    FormatPart::DirectRemoteAddressWithoutPort => {
                        value.push_str(&req.conn.peer.ip().to_string());
                    }
                }
            }
            if value.is_empty() {
                value.clone_from(default_value);
            }
            if value.is_empty() {
                return false;
            }
            push(descriptor_key, value);
        }
    }
    true
}
