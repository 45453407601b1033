//! The network RBAC filter at run time: a connection is judged once, on its
//! first read (Envoy's `ONE_TIME_ON_FIRST_BYTE`: `onData`, which also runs
//! for a close with no data), by each of its chain's filters in order, with
//! the HTTP filter's evaluator fed connection facts only. A denied connection
//! is closed without flushing (the bytes read are dropped) and its
//! `%CONNECTION_TERMINATION_DETAILS%` is
//! `rbac_access_denied_matched_policy[<policy>]`. The TCP proxy has already
//! connected upstream by then, as in Envoy.
//!
//! Stats, in the root scope, per stat prefix: `<stat_prefix>.rbac.allowed`,
//! `.denied`, and `<stat_prefix>.rbac.<shadow_rules_stat_prefix>.shadow_allowed`,
//! `shadow_denied` (each joining dot only when the prefix has none).

use crate::request::termination::Termination;
use crate::stats::{Counter, Sample};
use arc_swap::ArcSwap;
use courier_config::filters::rbac::RbacAction;
use courier_config::listener::network_rbac::NetworkRbac;
use courier_filters::rbac::eval;
use courier_filters::{ConnFacts, RequestState};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The counters of one stat prefix.
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections the enforced engine allowed.
    pub allowed: Counter,
    /// Connections it denied.
    pub denied: Counter,
    /// Connections the shadow engine would have allowed.
    pub shadow_allowed: Counter,
    /// Connections it would have denied.
    pub shadow_denied: Counter,
}

/// (`<stat_prefix>rbac.`, `<shadow_rules_stat_prefix>`) and their counters.
type Table = ArcSwap<Vec<((String, String), Arc<Stats>)>>;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(Table::default)
}

fn register(prefix: String, shadow: String) -> Arc<Stats> {
    let t = table();
    let key = (prefix, shadow);
    if let Some((_, s)) = t.load().iter().find(|(k, _)| *k == key) {
        return Arc::clone(s);
    }
    let stats = Arc::new(Stats::default());
    let mut next = Vec::clone(&t.load());
    next.push((key, Arc::clone(&stats)));
    t.store(Arc::new(next));
    stats
}

/// Every network RBAC sample.
pub fn samples(out: &mut Vec<Sample>) {
    for ((prefix, shadow), s) in table().load().iter() {
        out.push((format!("{prefix}allowed"), s.allowed.get()));
        out.push((format!("{prefix}denied"), s.denied.get()));
        out.push((
            format!("{prefix}{shadow}shadow_allowed"),
            s.shadow_allowed.get(),
        ));
        out.push((
            format!("{prefix}{shadow}shadow_denied"),
            s.shadow_denied.get(),
        ));
    }
}

/// Zeroes the counters (`/reset_counters`).
pub fn reset_counters() {
    for (_, s) in table().load().iter() {
        for c in [&s.allowed, &s.denied, &s.shadow_allowed, &s.shadow_denied] {
            c.reset();
        }
    }
}

/// Envoy's `statPrefixJoin` of a prefix and a name: a dot between unless
/// the prefix is empty or already ends with one.
fn joined(p: &str) -> String {
    if p.is_empty() || p.ends_with('.') {
        p.to_string()
    } else {
        format!("{p}.")
    }
}

/// One filter config and its counters (made by the main thread as it
/// builds a listener), shared by the workers.
#[derive(Debug)]
pub struct Judge {
    config: Arc<NetworkRbac>,
    stats: Arc<Stats>,
}

impl Judge {
    /// The judge of `config`.
    pub fn new(config: Arc<NetworkRbac>) -> Arc<Self> {
        Arc::new(Self {
            stats: register(
                format!("{}rbac.", joined(&config.stat_prefix)),
                joined(&config.rbac.shadow_rules_stat_prefix),
            ),
            config,
        })
    }

    /// Judges a connection: `Err` with the termination details when denied.
    /// The shadow engine first, then the enforced one, as Envoy; without an
    /// enforced engine the connection passes uncounted.
    pub fn judge(&self, conn: &ConnFacts) -> Result<(), String> {
        let head = http::Request::new(()).into_parts().0;
        // On a connection the "remote" address is the connection's source.
        let req = RequestState::new(head, conn, conn.source.ip(), None);
        let c = &self.config.rbac;
        let shadow = if let Some(e) = &c.shadow_rules {
            Some(eval::evaluate(e, &req).allowed)
        } else {
            c.shadow_matcher.as_ref().map(|m| {
                eval::evaluate_matcher(m, &req).is_some_and(|a| a.action == RbacAction::Allow)
            })
        };
        match shadow {
            Some(true) => self.stats.shadow_allowed.inc(),
            Some(false) => self.stats.shadow_denied.inc(),
            None => {}
        }
        let verdict = if let Some(m) = &c.matcher {
            // No predicate and no `on_no_match`: denied (Envoy's default).
            let a = eval::evaluate_matcher(m, &req);
            match a {
                Some(a) if a.action == RbacAction::Allow => None,
                other => Some(other.map_or("none", |a| a.name.as_str())),
            }
        } else if let Some(e) = &c.rules {
            let r = eval::evaluate(e, &req);
            (!r.allowed).then(|| r.matched.map_or("none", |p| p.name.as_str()))
        } else {
            return Ok(());
        };
        match verdict {
            None => {
                self.stats.allowed.inc();
                Ok(())
            }
            Some(name) => {
                self.stats.denied.inc();
                Err(format!(
                    "rbac_access_denied_matched_policy[{}]",
                    name.replace(char::is_whitespace, "_")
                ))
            }
        }
    }
}

/// A downstream stream whose first read is judged by the chain's filters:
/// a denial turns it (and every later read) into an error, which closes
/// the connection.
pub struct Gate<S> {
    inner: S,
    pending: Option<(Vec<Arc<Judge>>, ConnFacts)>,
    verdict: Arc<Termination>,
}

impl<S> Gate<S> {
    /// Gates `inner` by the chain's judges and the connection's facts (none:
    /// a plain pass-through).
    pub fn new(
        inner: S,
        pending: Option<(Vec<Arc<Judge>>, ConnFacts)>,
    ) -> (Self, Arc<Termination>) {
        let verdict = Arc::new(Termination::default());
        let pending = pending.filter(|(judges, _)| !judges.is_empty());
        (
            Self {
                inner,
                pending,
                verdict: Arc::clone(&verdict),
            },
            verdict,
        )
    }
}

fn denied() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "denied by network RBAC")
}

impl<S: AsyncRead + Unpin> AsyncRead for Gate<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.verdict.denied.get().is_some() {
            return Poll::Ready(Err(denied()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let Some((judges, conn)) = self.pending.take() else {
            return Poll::Ready(Ok(()));
        };
        // Each filter in chain order; the first denial stops the chain.
        for j in &judges {
            if let Err(details) = j.judge(&conn) {
                let read = (buf.filled().len() - before) as u64;
                buf.set_filled(before);
                let _ = self.verdict.denied.set((details, read));
                return Poll::Ready(Err(denied()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gate<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
#[path = "network_rbac_tests.rs"]
mod tests;
