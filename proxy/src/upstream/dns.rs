//! DNS for STRICT_DNS (every address of every endpoint) and LOGICAL_DNS (the
//! first address) clusters: resolved once before the workers start, then every
//! `dns_refresh_rate` on the main thread; each result is published as a new host
//! set that workers pick up on their next request.

use super::host::{self, Host, HostSet, LocalitySpan};
use super::socket::HostSockets;
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
    family.filter(addrs)
}

/// Builds a host set from per-endpoint answers (`answers[p][i]` for endpoint `i` of
/// priority `p`, flattened over localities), grouped by locality when
/// `locality_weighted`.
pub fn host_set(
    la: &LoadAssignment,
    answers: &[Vec<Vec<SocketAddr>>],
    logical: bool,
    previous: Option<&HostSet>,
    locality_weighted: bool,
    sockets: &HostSockets<'_>,
) -> HostSet {
    let mut priorities: Vec<Vec<Arc<Host>>> = Vec::with_capacity(la.priorities.len());
    let mut spans: Vec<Vec<LocalitySpan>> = Vec::new();
    for (p, level) in la.priorities.iter().enumerate() {
        let mut hosts = Vec::new();
        let mut level_spans = Vec::new();
        let level_sockets = sockets.level(level);
        let localities = host::level_localities(level);
        for (weight, endpoints) in host::level_groups(level, locality_weighted) {
            let start = hosts.len();
            for (i, e) in endpoints {
                let addrs = answers.get(p).and_then(|a| a.get(i));
                for addr in addrs.into_iter().flatten() {
                    let socket = HostSockets::of(&level_sockets, i);
                    let locality = localities.get(i).cloned().flatten();
                    hosts.push(host::resolved_host(
                        e,
                        *addr,
                        previous,
                        (socket, sockets),
                        locality,
                    ));
                    if logical {
                        break;
                    }
                }
            }
            level_spans.push(LocalitySpan {
                hosts: hosts.len() - start,
                weight,
            });
        }
        priorities.push(hosts);
        spans.push(level_spans);
    }
    HostSet::with_localities(
        priorities,
        locality_weighted.then_some(spans),
        la.overprovisioning_factor,
    )
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
                .map(|e| match e.address.socket() {
                    // A pipe is refused in DNS clusters by the config.
                    None => Vec::new(),
                    Some(sa) => match sa.ip {
                        Some(ip) => vec![SocketAddr::new(ip, sa.port)],
                        None => (sa.host.as_str(), sa.port)
                            .to_socket_addrs()
                            .map(|a| filter_family(a.collect(), family))
                            .unwrap_or_else(|err| {
                                tracing::warn!(host = %sa.host, error = %err, "DNS resolution failed");
                                Vec::new()
                            }),
                    },
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
            // A pipe is refused in DNS clusters by the config.
            let Some(sa) = e.address.socket() else {
                answers.push(Vec::new());
                continue;
            };
            let addrs = match sa.ip {
                Some(ip) => vec![SocketAddr::new(ip, sa.port)],
                None => match tokio::net::lookup_host((sa.host.as_str(), sa.port)).await {
                    Ok(a) => filter_family(a.collect(), family),
                    Err(err) => {
                        tracing::warn!(host = %sa.host, error = %err, "DNS refresh failed");
                        return None;
                    }
                },
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

    #[test]
    fn resolved_hosts_keep_their_localities() {
        // Endpoint 0 (locality a) resolves to two addresses, endpoint 1
        // (locality b) to one; the answers are indexed in config order.
        let la = super::super::host::tests::assignment(
            &[(Some("a"), Some(1), &[1]), (Some("b"), Some(3), &[2])],
            140,
        );
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let a2: SocketAddr = "127.0.0.2:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let answers = vec![vec![vec![a, a2], vec![b]]];
        let s = host_set(&la, &answers, false, None, true, &HostSockets::NONE);
        let l = s.localities(0).unwrap();
        let hosts = |i| {
            l.healthy(i)
                .unwrap()
                .0
                .iter()
                .map(|h| h.address)
                .collect::<Vec<_>>()
        };
        assert_eq!((hosts(0), hosts(1)), (vec![a, a2], vec![b]));
        // LOGICAL_DNS keeps the first address of each.
        let s = host_set(&la, &answers, true, Some(&s), true, &HostSockets::NONE);
        let l = s.localities(0).unwrap();
        assert_eq!(l.healthy(0).unwrap().0.len(), 1);
        assert!(
            host_set(&la, &answers, false, None, false, &HostSockets::NONE)
                .localities(0)
                .is_none()
        );
    }
}
