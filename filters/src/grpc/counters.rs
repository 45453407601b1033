//! The gRPC counters Envoy's `Grpc::Context` keeps in the route cluster's scope:
//! `cluster.<cluster>.<grpc|grpc-web>[.<service>.<method>].<name>`, `<name>` one of
//! `success`, `failure`, `total`, the `grpc-status` value (`0`..`16`),
//! `request_message_count` and `response_message_count`. Envoy makes these names from
//! the request (the path's service and method), so they are made on a method's first
//! request and shared after that; a counter never counted is absent, as Envoy creates
//! each on first use.

use arc_swap::ArcSwap;
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many names (cluster, protocol, service and method) a filter counts for: Envoy's
/// `stats_for_all_methods` lets clients name methods, so past this new names are not
/// counted rather than growing without end.
const MAX_NAMES: usize = 10_000;

/// The counters of one `cluster.<c>.<protocol>[.<service>.<method>]` prefix.
#[derive(Debug, Default)]
pub struct MethodCounters {
    /// `success`: `grpc-status: 0`.
    pub success: AtomicU64,
    /// `failure`: any other `grpc-status`.
    pub failure: AtomicU64,
    /// `total`.
    pub total: AtomicU64,
    /// `request_message_count` (grpc_stats).
    pub request_message_count: AtomicU64,
    /// `response_message_count` (grpc_stats).
    pub response_message_count: AtomicU64,
    /// One counter per `grpc-status` value `0`..=`16` (Envoy's names for the codes it
    /// knows).
    pub status: [AtomicU64; 17],
}

impl MethodCounters {
    /// Envoy's `Context::chargeStat` on a `grpc-status` header: nothing without one;
    /// else the status's own counter, `success` or `failure`, and `total`.
    pub fn charge(&self, grpc_status: Option<&HeaderValue>) {
        let Some(v) = grpc_status else { return };
        let v = v.as_bytes();
        // Envoy names a status it does not know by its text; courier counts only the
        // seventeen codes (a status outside them still counts as a failure).
        if let Some(c) = std::str::from_utf8(v)
            .ok()
            .filter(|s| s.len() <= 2 && (s.len() == 1 || !s.starts_with('0')))
            .and_then(|s| s.parse::<usize>().ok())
            .and_then(|n| self.status.get(n))
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.charge_success(v == b"0");
    }

    /// Envoy's `Context::chargeStat` on an outcome: `success` or `failure`, and `total`
    /// (a Connect request's, which has no `grpc-status`).
    pub fn charge_success(&self, ok: bool) {
        (if ok { &self.success } else { &self.failure }).fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }
}

type Names = HashMap<Box<str>, Arc<MethodCounters>>;

/// The counters by prefix, an entry added on a prefix's first use: read without a lock,
/// copied on the rare insert.
#[derive(Debug)]
pub struct GrpcCounters(ArcSwap<Names>);

impl Default for GrpcCounters {
    fn default() -> Self {
        Self(ArcSwap::from_pointee(HashMap::new()))
    }
}

impl GrpcCounters {
    /// The counters of `cluster.<cluster>.<protocol>[.<service>.<method>]` (none once
    /// [`MAX_NAMES`] are in use).
    pub fn get(
        &self,
        cluster: &str,
        protocol: &str,
        method: Option<(&str, &str)>,
    ) -> Option<Arc<MethodCounters>> {
        let name = match method {
            Some((s, m)) => format!("cluster.{cluster}.{protocol}.{s}.{m}"),
            None => format!("cluster.{cluster}.{protocol}"),
        };
        if let Some(c) = self.0.load().get(name.as_str()) {
            return Some(Arc::clone(c));
        }
        self.0.rcu(|names| {
            if names.len() >= MAX_NAMES || names.contains_key(name.as_str()) {
                return Arc::clone(names);
            }
            let mut more = Names::clone(names);
            more.insert(name.as_str().into(), Arc::default());
            Arc::new(more)
        });
        self.0.load().get(name.as_str()).map(Arc::clone)
    }

    /// Calls `f` with each counter's full name.
    pub fn each(&self, mut f: impl FnMut(String, &AtomicU64)) {
        const STATUS: [&str; 17] = [
            "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15",
            "16",
        ];
        for (prefix, c) in self.0.load().iter() {
            f(format!("{prefix}.success"), &c.success);
            f(format!("{prefix}.failure"), &c.failure);
            f(format!("{prefix}.total"), &c.total);
            f(
                format!("{prefix}.request_message_count"),
                &c.request_message_count,
            );
            f(
                format!("{prefix}.response_message_count"),
                &c.response_message_count,
            );
            for (name, s) in STATUS.iter().zip(&c.status) {
                f(format!("{prefix}.{name}"), s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_status_success_and_total() {
        let all = GrpcCounters::default();
        let c = all.get("c", "grpc", Some(("a.B", "M"))).unwrap();
        c.charge(Some(&HeaderValue::from_static("0")));
        c.charge(Some(&HeaderValue::from_static("14")));
        c.charge(Some(&HeaderValue::from_static("99")));
        c.charge(None);
        let same = all.get("c", "grpc", Some(("a.B", "M"))).unwrap();
        assert!(Arc::ptr_eq(&c, &same));
        let mut seen = Vec::new();
        all.each(|n, v| {
            let v = v.load(Ordering::Relaxed);
            if v != 0 {
                seen.push((n, v));
            }
        });
        seen.sort();
        assert_eq!(
            seen,
            [
                ("cluster.c.grpc.a.B.M.0".to_string(), 1),
                ("cluster.c.grpc.a.B.M.14".to_string(), 1),
                ("cluster.c.grpc.a.B.M.failure".to_string(), 2),
                ("cluster.c.grpc.a.B.M.success".to_string(), 1),
                ("cluster.c.grpc.a.B.M.total".to_string(), 3),
            ]
        );
        assert!(all.get("c", "grpc", None).is_some());
    }
}
