//! An index over an RBAC engine's policies by their exact-match principals, so that
//! evaluation looks candidate policies up by hash (and by CIDR prefix length) instead of
//! testing every policy (issue 4: "evaluation cost does not grow with the number of
//! policies for exact-match principals").
//!
//! The index is only a filter: a policy is *keyed* when every one of its (OR-ed) principals
//! can only match a request that carries one of a few exact keys (a peer-certificate name,
//! a header value, an address inside a CIDR, a metadata string). Evaluation takes the
//! posting lists of the keys the request carries plus the list of unkeyed policies and
//! evaluates those candidates in full, in name order, so the result (and the first matching
//! policy reported) is exactly the one a linear scan gives.

use super::rbac::{MetadataSource, Principal, RbacPolicy};
use crate::matcher::{HeaderMatcher, HeaderTest, StringMatcher, StringPattern, ValueMatcher};
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;

/// Positions of policies in [`super::rbac::RbacEngine::policies`], ascending.
pub type Postings = Vec<u32>;

/// Which connection address a CIDR principal tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressKind {
    /// `source_ip` (the connection's peer after PROXY protocol).
    Source,
    /// `direct_remote_ip` (the socket peer).
    DirectRemote,
    /// `remote_ip` (the trusted client address).
    Remote,
}

/// CIDR principals of one address kind, one hash table per (family, prefix length), so a
/// lookup costs one probe per distinct prefix length, not one test per policy.
#[derive(Debug, Clone, Default)]
pub struct CidrTables {
    /// `(prefix length, network address → postings)` for IPv4 ranges.
    pub v4: Vec<(u8, HashMap<IpAddr, Postings>)>,
    /// The same for IPv6 ranges.
    pub v6: Vec<(u8, HashMap<IpAddr, Postings>)>,
}

impl CidrTables {
    fn insert(&mut self, net: IpNet, pos: u32) {
        let tables = match net {
            IpNet::V4(_) => &mut self.v4,
            IpNet::V6(_) => &mut self.v6,
        };
        let len = net.prefix_len();
        let i = match tables.iter().position(|(l, _)| *l == len) {
            Some(i) => i,
            None => {
                tables.push((len, HashMap::new()));
                tables.len() - 1
            }
        };
        push(tables[i].1.entry(net.network()).or_default(), pos);
    }

    /// The posting lists of every range that contains `ip` (already canonical: an
    /// IPv4-mapped IPv6 address given as IPv4).
    pub fn lookup(&self, ip: IpAddr) -> impl Iterator<Item = &Postings> {
        let tables = match ip {
            IpAddr::V4(_) => &self.v4,
            IpAddr::V6(_) => &self.v6,
        };
        tables.iter().filter_map(move |(len, map)| {
            let net = IpNet::new(ip, *len).ok()?.trunc();
            map.get(&net.network())
        })
    }

    fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// Exact-string metadata principals reading one value (same source, namespace and path).
#[derive(Debug, Clone)]
pub struct MetadataTable {
    /// Dynamic or route metadata.
    pub source: MetadataSource,
    /// The namespace.
    pub filter: String,
    /// The keys walked into the namespace (non-empty).
    pub path: Vec<String>,
    /// String value → postings.
    pub values: HashMap<String, Postings>,
}

/// The compiled index of one engine.
#[derive(Debug, Clone, Default)]
pub struct PolicyIndex {
    /// Policies with a principal that is not keyed: always evaluated.
    pub scan: Postings,
    /// `authenticated.principal_name` exact (case-sensitive): URI SAN, DNS SAN or subject.
    pub principal_names: HashMap<String, Postings>,
    /// Header exact (case-sensitive, not inverted): header name → value → postings.
    pub headers: Vec<(String, HashMap<String, Postings>)>,
    /// CIDR principals by address kind.
    pub source_ip: CidrTables,
    /// `direct_remote_ip` ranges.
    pub direct_remote_ip: CidrTables,
    /// `remote_ip` ranges.
    pub remote_ip: CidrTables,
    /// Metadata string-exact principals.
    pub metadata: Vec<MetadataTable>,
}

/// One exact key a principal needs the request to carry.
enum Key<'p> {
    Name(&'p str),
    Header(&'p str, &'p str),
    Cidr(AddressKind, IpNet),
    Metadata(MetadataSource, &'p str, &'p [String], &'p str),
}

impl PolicyIndex {
    /// Builds the index of `policies` (in evaluation order).
    pub fn build(policies: &[RbacPolicy]) -> Self {
        let mut index = Self::default();
        for (pos, p) in policies.iter().enumerate() {
            let Ok(pos) = u32::try_from(pos) else {
                // Beyond u32::MAX policies: scan (never reached in practice).
                continue;
            };
            let keys: Option<Vec<Key<'_>>> =
                p.principals.iter().try_fold(Vec::new(), |mut acc, pr| {
                    acc.extend(keys(pr)?);
                    Some(acc)
                });
            match keys {
                Some(keys) if !keys.is_empty() => {
                    for k in keys {
                        index.insert(k, pos);
                    }
                }
                _ => index.scan.push(pos),
            }
        }
        index
    }

    /// Whether every policy is scanned (nothing to look up).
    pub fn is_scan_only(&self) -> bool {
        self.principal_names.is_empty()
            && self.headers.is_empty()
            && self.source_ip.is_empty()
            && self.direct_remote_ip.is_empty()
            && self.remote_ip.is_empty()
            && self.metadata.is_empty()
    }

    fn insert(&mut self, key: Key<'_>, pos: u32) {
        match key {
            Key::Name(n) => push(self.principal_names.entry(n.to_string()).or_default(), pos),
            Key::Header(name, value) => {
                let i = match self.headers.iter().position(|(n, _)| n == name) {
                    Some(i) => i,
                    None => {
                        self.headers.push((name.to_string(), HashMap::new()));
                        self.headers.len() - 1
                    }
                };
                push(self.headers[i].1.entry(value.to_string()).or_default(), pos);
            }
            Key::Cidr(kind, net) => match kind {
                AddressKind::Source => self.source_ip.insert(net, pos),
                AddressKind::DirectRemote => self.direct_remote_ip.insert(net, pos),
                AddressKind::Remote => self.remote_ip.insert(net, pos),
            },
            Key::Metadata(source, filter, path, value) => {
                let i = match self
                    .metadata
                    .iter()
                    .position(|t| t.source == source && t.filter == filter && t.path == path)
                {
                    Some(i) => i,
                    None => {
                        self.metadata.push(MetadataTable {
                            source,
                            filter: filter.to_string(),
                            path: path.to_vec(),
                            values: HashMap::new(),
                        });
                        self.metadata.len() - 1
                    }
                };
                push(
                    self.metadata[i]
                        .values
                        .entry(value.to_string())
                        .or_default(),
                    pos,
                );
            }
        }
    }
}

/// Appends `pos` unless it is already last (a policy naming one key twice).
fn push(list: &mut Postings, pos: u32) {
    if list.last() != Some(&pos) {
        list.push(pos);
    }
}

/// A case-sensitive exact pattern.
fn exact(sm: &StringMatcher) -> Option<&str> {
    match &sm.pattern {
        StringPattern::Exact(s) if !sm.ignore_case => Some(s),
        _ => None,
    }
}

/// The keys one of which a request must carry for `p` to match; `None` when `p` can match
/// without any (it is then scanned).
fn keys(p: &Principal) -> Option<Vec<Key<'_>>> {
    Some(match p {
        Principal::Authenticated(Some(sm)) => vec![Key::Name(exact(sm)?)],
        Principal::Header(h) => vec![header_key(h)?],
        Principal::SourceIp(c) => vec![Key::Cidr(AddressKind::Source, c.0)],
        Principal::DirectRemoteIp(c) => vec![Key::Cidr(AddressKind::DirectRemote, c.0)],
        Principal::RemoteIp(c) => vec![Key::Cidr(AddressKind::Remote, c.0)],
        Principal::Metadata(m) => {
            let mm = &m.matcher;
            match &mm.value {
                ValueMatcher::String(sm) if !mm.invert && !mm.path.is_empty() => {
                    vec![Key::Metadata(m.source, &mm.filter, &mm.path, exact(sm)?)]
                }
                _ => return None,
            }
        }
        // Any member matching needs one of the members' keys.
        Principal::Or(v) => v.iter().try_fold(Vec::new(), |mut acc, x| {
            acc.extend(keys(x)?);
            Some(acc)
        })?,
        // All members must match, so the keys of any one keyed member will do: the fewest.
        Principal::And(v) => v.iter().filter_map(keys).min_by_key(Vec::len)?,
        Principal::Any
        | Principal::Not(_)
        | Principal::Authenticated(None)
        | Principal::UrlPath(_) => {
            return None;
        }
    })
}

/// A header exact match: only a present header equal to the value matches. Inverted tests
/// match on absence of the value, and `treat_missing_header_as_empty` with an empty value
/// matches a missing header: both are scanned.
fn header_key(h: &HeaderMatcher) -> Option<Key<'_>> {
    let HeaderTest::Value(sm) = &h.test else {
        return None;
    };
    let v = exact(sm)?;
    if h.invert || (h.treat_missing_as_empty && v.is_empty()) {
        return None;
    }
    Some(Key::Header(&h.name, v))
}
