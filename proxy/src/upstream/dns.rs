//! DNS for STRICT_DNS (every address of every endpoint) and LOGICAL_DNS (the
//! first address) clusters: resolved once before the workers start, then every
//! `dns_refresh_rate` on the main thread; each result is published as a new host
//! set that workers pick up on their next request.

use super::host::{self, Host, HostSet};
use courier_config::cluster::{Discovery, DnsLookupFamily, LoadAssignment};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

/// Whether `discovery` is a DNS kind; `logical` = keep only the first address.
pub fn dns_kind(discovery: &Discovery) -> Option<(&courier_config::cluster::Dns, bool)> {
    match discovery {
        Discovery::StrictDns(d) => Some((d, false)),
        Discovery::LogicalDns(d) => Some((d, true)),
        _ => None,
    }
}

/// Keeps the addresses `family` asks for, in Envoy's preference.
pub fn filter_family(addrs: Vec<SocketAddr>, family: DnsLookupFamily) -> Vec<SocketAddr> {
    let (v4, v6): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs.into_iter().partition(|a| a.is_ipv4());
    match family {
        DnsLookupFamily::V4Only => v4,
        DnsLookupFamily::V6Only => v6,
        DnsLookupFamily::Auto => {
            if v6.is_empty() {
                v4
            } else {
                v6
            }
        }
        DnsLookupFamily::V4Preferred => {
            if v4.is_empty() {
                v6
            } else {
                v4
            }
        }
        DnsLookupFamily::All => v4.into_iter().chain(v6).collect(),
    }
}

/// Builds a host set from per-endpoint answers (`answers[p][i]` for endpoint `i` of
/// priority `p`, flattened over localities).
pub fn host_set(
    la: &LoadAssignment,
    answers: &[Vec<Vec<SocketAddr>>],
    logical: bool,
    previous: Option<&HostSet>,
) -> HostSet {
    let mut priorities: Vec<Vec<Arc<Host>>> = Vec::with_capacity(la.priorities.len());
    for (p, level) in la.priorities.iter().enumerate() {
        let mut hosts = Vec::new();
        let endpoints = level.localities.iter().flat_map(|l| l.endpoints.iter());
        for (i, e) in endpoints.enumerate() {
            let addrs = answers.get(p).and_then(|a| a.get(i));
            for addr in addrs.into_iter().flatten() {
                hosts.push(host::resolved_host(e, *addr, previous));
                if logical {
                    break;
                }
            }
        }
        priorities.push(hosts);
    }
    HostSet::new(priorities, la.overprovisioning_factor)
}

/// Resolves every endpoint with the blocking resolver (startup, before workers run).
pub fn resolve_blocking(la: &LoadAssignment, family: DnsLookupFamily) -> Vec<Vec<Vec<SocketAddr>>> {
    la.priorities
        .iter()
        .map(|level| {
            level
                .localities
                .iter()
                .flat_map(|l| l.endpoints.iter())
                .map(|e| match e.address.ip {
                    Some(ip) => vec![SocketAddr::new(ip, e.address.port)],
                    None => (e.address.host.as_str(), e.address.port)
                        .to_socket_addrs()
                        .map(|a| filter_family(a.collect(), family))
                        .unwrap_or_else(|err| {
                            tracing::warn!(host = %e.address.host, error = %err, "DNS resolution failed");
                            Vec::new()
                        }),
                })
                .collect()
        })
        .collect()
}

/// Resolves every endpoint on the runtime; `None` when a lookup failed (the caller
/// keeps the hosts it has, as Envoy keeps the last good answer).
pub async fn resolve(
    la: &LoadAssignment,
    family: DnsLookupFamily,
) -> Option<Vec<Vec<Vec<SocketAddr>>>> {
    let mut out = Vec::with_capacity(la.priorities.len());
    for level in &la.priorities {
        let mut answers = Vec::new();
        for e in level.localities.iter().flat_map(|l| l.endpoints.iter()) {
            let addrs = match e.address.ip {
                Some(ip) => vec![SocketAddr::new(ip, e.address.port)],
                None => {
                    match tokio::net::lookup_host((e.address.host.as_str(), e.address.port)).await {
                        Ok(a) => filter_family(a.collect(), family),
                        Err(err) => {
                            tracing::warn!(host = %e.address.host, error = %err, "DNS refresh failed");
                            return None;
                        }
                    }
                }
            };
            answers.push(addrs);
        }
        out.push(answers);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_prefer_as_envoy() {
        let v4: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let v6: SocketAddr = "[::1]:1".parse().unwrap();
        let both = || vec![v4, v6];
        assert_eq!(filter_family(both(), DnsLookupFamily::V4Only), vec![v4]);
        assert_eq!(filter_family(both(), DnsLookupFamily::V6Only), vec![v6]);
        assert_eq!(filter_family(both(), DnsLookupFamily::Auto), vec![v6]);
        assert_eq!(filter_family(vec![v4], DnsLookupFamily::Auto), vec![v4]);
        assert_eq!(
            filter_family(both(), DnsLookupFamily::V4Preferred),
            vec![v4]
        );
        assert_eq!(filter_family(both(), DnsLookupFamily::All), vec![v4, v6]);
    }
}
