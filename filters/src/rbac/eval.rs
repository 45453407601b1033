//! Evaluation of compiled RBAC policies against one request (envoy-reference 4.2, 4.3).
//! Nothing here allocates except joining a repeated header a matcher asks for.

use crate::request::RequestState;
use courier_config::filters::rbac::{
    MetadataSource, Permission, Principal, RbacAction, RbacEngine, RbacPolicy, SourcedMetadata,
};
use courier_config::filters::rbac_matcher::{MatchedAction, Predicate, RbacMatcher};
use courier_config::matcher::HeaderMatcher;
use std::net::IpAddr;

/// The outcome of one engine.
#[derive(Debug, Clone, Copy)]
pub struct EngineResult<'e> {
    /// Whether the engine lets the request through (LOG always does).
    pub allowed: bool,
    /// The first matching policy, in name order.
    pub matched: Option<&'e RbacPolicy>,
    /// Its position in the engine's policies (per-policy stats are kept in that order).
    pub position: Option<usize>,
}

/// Evaluates `engine`: the first policy (in name order) whose permissions and principals
/// both match decides. Candidates come from the engine's index (see
/// [`courier_config::filters::rbac_index`]), so exact-match principals cost a lookup.
pub fn evaluate<'e>(engine: &'e RbacEngine, req: &RequestState<'_>) -> EngineResult<'e> {
    evaluate_counted(engine, req, &mut 0)
}

/// [`evaluate`], adding to `evaluated` the number of policies tested in full (tests and
/// benches show the index at work with it).
pub fn evaluate_counted<'e>(
    engine: &'e RbacEngine,
    req: &RequestState<'_>,
    evaluated: &mut usize,
) -> EngineResult<'e> {
    let first = first_match(engine, req, evaluated).map(|i| i as usize);
    result(engine, first)
}

/// The reference evaluation: every policy in order, no index. Must agree with
/// [`evaluate`]; kept for tests and benches.
pub fn evaluate_linear<'e>(engine: &'e RbacEngine, req: &RequestState<'_>) -> EngineResult<'e> {
    let first = engine.policies.iter().position(|p| policy_matches(p, req));
    result(engine, first)
}

fn result(engine: &RbacEngine, position: Option<usize>) -> EngineResult<'_> {
    let matched = position.and_then(|i| engine.policies.get(i));
    let allowed = match engine.action {
        RbacAction::Allow => matched.is_some(),
        RbacAction::Deny => matched.is_none(),
        RbacAction::Log => true,
    };
    EngineResult {
        allowed,
        matched,
        position,
    }
}

/// The lowest position of a matching policy. Each candidate list is ascending, so each is
/// walked only below the best position found so far; the minimum over the lists is the
/// first match of a linear scan, since every policy that can match is in some list.
fn first_match(engine: &RbacEngine, req: &RequestState<'_>, evaluated: &mut usize) -> Option<u32> {
    let mut walk = Walk {
        policies: &engine.policies,
        req,
        best: u32::MAX,
        evaluated,
    };
    let index = &engine.index;
    walk.list(&index.scan);
    if index.is_scan_only() {
        return (walk.best != u32::MAX).then_some(walk.best);
    }
    let cert = req.conn.tls.as_ref().and_then(|t| t.peer_cert.as_ref());
    if let Some(cert) = cert.filter(|_| !index.principal_names.is_empty()) {
        let names = cert.uri_sans.iter().chain(&cert.dns_sans);
        for name in names.chain(std::iter::once(&cert.subject)) {
            if let Some(l) = index.principal_names.get(name.as_str()) {
                walk.list(l);
            }
        }
    }
    for (name, values) in &index.headers {
        if let Some(l) = req.header(name).and_then(|v| values.get(v.as_ref())) {
            walk.list(l);
        }
    }
    for l in index.source_ip.lookup(canonical(req.conn.source.ip())) {
        walk.list(l);
    }
    for l in index.direct_remote_ip.lookup(canonical(req.conn.peer.ip())) {
        walk.list(l);
    }
    for l in index.remote_ip.lookup(canonical(req.remote)) {
        walk.list(l);
    }
    for t in &index.metadata {
        let md = match t.source {
            MetadataSource::Dynamic => Some(&req.metadata),
            MetadataSource::Route => req.route.and_then(|r| r.metadata),
        };
        let value = md.and_then(|md| md.get(&t.filter)).and_then(|ns| {
            let (first, rest) = t.path.split_first()?;
            let mut v = ns.get(first)?;
            for key in rest {
                v = v.as_object()?.get(key)?;
            }
            v.as_str()
        });
        if let Some(l) = value.and_then(|v| t.values.get(v)) {
            walk.list(l);
        }
    }
    (walk.best != u32::MAX).then_some(walk.best)
}

/// The walk over candidate lists: the best (lowest) matching position so far.
struct Walk<'a, 'r, 's> {
    policies: &'a [RbacPolicy],
    req: &'r RequestState<'s>,
    best: u32,
    evaluated: &'a mut usize,
}

impl Walk<'_, '_, '_> {
    fn list(&mut self, list: &[u32]) {
        for &i in list {
            if i >= self.best {
                return;
            }
            let Some(p) = self.policies.get(i as usize) else {
                return;
            };
            *self.evaluated += 1;
            if policy_matches(p, self.req) {
                self.best = i;
                return;
            }
        }
    }
}

fn policy_matches(p: &RbacPolicy, req: &RequestState<'_>) -> bool {
    p.permissions.iter().any(|x| permission(x, req))
        && p.principals.iter().any(|x| principal(x, req))
        && p.condition
            .as_ref()
            .is_none_or(|c| c.matches(&crate::cel_attributes::Deciding(req)))
}

fn permission(p: &Permission, req: &RequestState<'_>) -> bool {
    match p {
        Permission::Any => true,
        Permission::And(v) => v.iter().all(|x| permission(x, req)),
        Permission::Or(v) => v.iter().any(|x| permission(x, req)),
        Permission::Not(x) => !permission(x, req),
        Permission::Header(h) => header(h, req),
        Permission::UrlPath(sm) => sm.matches(url_path(req)),
        Permission::DestinationIp(c) => c.contains(req.conn.local.ip()),
        Permission::DestinationPort(port) => req.conn.local.port() == *port,
        Permission::DestinationPortRange { start, end } => {
            let port = u32::from(req.conn.local.port());
            *start <= port && port < *end
        }
        Permission::Metadata(m) => metadata(m, req),
        Permission::DestinationPortText(sm) => sm.matches(&req.conn.local.port().to_string()),
        Permission::Cel(e) => e.matches(&crate::cel_attributes::Deciding(req)),
        Permission::RequestedServerName(sm) => {
            let sni = req
                .conn
                .tls
                .as_ref()
                .and_then(|t| t.sni.as_deref())
                .unwrap_or("");
            sm.matches(sni)
        }
    }
}

fn principal(p: &Principal, req: &RequestState<'_>) -> bool {
    match p {
        Principal::Any => true,
        Principal::And(v) => v.iter().all(|x| principal(x, req)),
        Principal::Or(v) => v.iter().any(|x| principal(x, req)),
        Principal::Not(x) => !principal(x, req),
        Principal::Authenticated(name) => {
            let Some(tls) = req.conn.tls.as_ref() else {
                return false;
            };
            let Some(sm) = name else {
                // Envoy: any TLS connection when no principal_name is given.
                return true;
            };
            let Some(cert) = tls.peer_cert.as_ref() else {
                return false;
            };
            // URI SANs, then DNS SANs, then the subject.
            cert.uri_sans.iter().any(|s| sm.matches(s))
                || cert.dns_sans.iter().any(|s| sm.matches(s))
                || sm.matches(&cert.subject)
        }
        Principal::SourceIp(c) => c.contains(canonical(req.conn.source.ip())),
        Principal::DirectRemoteIp(c) => c.contains(canonical(req.conn.peer.ip())),
        Principal::RemoteIp(c) => c.contains(canonical(req.remote)),
        Principal::Header(h) => header(h, req),
        Principal::UrlPath(sm) => sm.matches(url_path(req)),
        Principal::Metadata(m) => metadata(m, req),
    }
}

/// An IPv4-mapped IPv6 peer (dual-stack listener) is matched as the IPv4 address, as
/// Envoy's address objects present it.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn header(h: &HeaderMatcher, req: &RequestState<'_>) -> bool {
    h.matches(req.header(&h.name).as_deref())
}

/// The path without query and fragment.
fn url_path<'r>(req: &'r RequestState<'_>) -> &'r str {
    let p = req.path();
    p.find(['?', '#']).map_or(p, |i| &p[..i])
}

fn metadata(m: &SourcedMetadata, req: &RequestState<'_>) -> bool {
    match m.source {
        MetadataSource::Dynamic => m.matcher.matches(&req.metadata),
        MetadataSource::Route => match req.route.and_then(|r| r.metadata) {
            Some(md) => m.matcher.matches(md),
            None => m.matcher.matches(&courier_config::core::MetadataMap::new()),
        },
    }
}

/// The action a unified matcher decides on for `req`: the first predicate that
/// matches, else `on_no_match`; `None` (denied) when neither.
pub fn evaluate_matcher<'m>(
    m: &'m RbacMatcher,
    req: &RequestState<'_>,
) -> Option<&'m MatchedAction> {
    m.rules
        .iter()
        .find(|(p, _)| predicate(p, req))
        .map(|(_, a)| a)
        .or(m.on_no_match.as_ref())
}

fn predicate(p: &Predicate, req: &RequestState<'_>) -> bool {
    match p {
        Predicate::And(v) => v.iter().all(|x| predicate(x, req)),
        Predicate::Or(v) => v.iter().any(|x| predicate(x, req)),
        Predicate::Not(x) => !predicate(x, req),
        Predicate::Permission(x) => permission(x, req),
        Predicate::Principal(x) => principal(x, req),
    }
}
