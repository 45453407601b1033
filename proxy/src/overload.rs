//! The overload manager and connection limits, as Envoy's edge configuration
//! sets them up: a heap monitor read on the main thread (courier's resident set
//! from `/proc/self/status`, the closest equivalent of tcmalloc's heap size, or
//! with `fixed_heap_use_allocated` the bytes allocated)
//! drives actions whose state workers read from atomics; the global and
//! per-listener connection limits are counters shared by every worker.
//! `shrink_heap` hands free memory back to the system (crate::heap_trim), so
//! the resident set falls when load does.

use arc_swap::ArcSwap;
use courier_config::Bootstrap;
use courier_config::overload::{ActionKind, ScaledTimer, TimerScale};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A connection limit and the connections it counts. The runtime may change
/// the limit while connections are counted (RTDS, `/runtime_modify`): a lower
/// limit refuses new connections until enough have closed, as in Envoy.
#[derive(Debug)]
pub struct Limit {
    /// `u64::MAX`: no limit (the runtime sets none at the moment).
    max: AtomicU64,
    active: AtomicU64,
}

impl Limit {
    fn new(max: u64) -> Arc<Self> {
        Arc::new(Limit {
            max: AtomicU64::new(max),
            active: AtomicU64::new(0),
        })
    }

    /// Takes a slot, or none when the limit is reached.
    fn take(self: &Arc<Self>) -> Option<Slot> {
        let max = self.max.load(Ordering::Relaxed);
        let taken = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            });
        taken.ok().map(|_| Slot(Arc::clone(self)))
    }
}

/// A connection counted against a limit until dropped.
#[derive(Debug)]
pub struct Slot(Arc<Limit>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Why a new connection is closed as it is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `global_downstream_max_connections` reached.
    Global,
    /// The listener's `connection_limit` reached.
    Listener,
    /// `stop_accepting_connections` is active.
    Overloaded,
}

/// The process's overload state.
#[derive(Debug, Default)]
pub struct Overload {
    global: Option<Arc<Limit>>,
    /// The global limit is the overload manager's monitor's, which the
    /// runtime key does not change (the monitor wins, as in Envoy).
    global_from_monitor: bool,
    /// Per listener name, the runtime's limit (`u64::MAX` when it sets none
    /// now). Written on the main thread when a listener is built or the
    /// runtime changes; workers hold the `Arc`s, never this map.
    listeners: ArcSwap<HashMap<String, Arc<Limit>>>,
    stop_requests: AtomicBool,
    stop_connections: AtomicBool,
    disable_keepalive: AtomicBool,
    shrink_heap: AtomicBool,
    /// Times `shrink_heap` released free memory (`shrink_count`).
    shrink_count: AtomicU64,
    /// `reduce_timeouts`' state in millionths (0: timers as configured).
    reduce_ppm: AtomicU64,
    /// The timers `reduce_timeouts` scales.
    timer_scales: Vec<TimerScale>,
    /// Told when `reduce_timeouts`' state changes, so sleeping idle timers
    /// re-arm at their new length.
    timers_changed: tokio::sync::Notify,
    /// Heap pressure in millionths (a gauge for stats).
    pressure_ppm: AtomicU64,
    /// An `overload_manager` is configured (its stats exist).
    configured: bool,
}

static STATE: OnceLock<Overload> = OnceLock::new();

/// The overload state (inert until [`init`] runs).
pub fn get() -> &'static Overload {
    STATE.get_or_init(Overload::default)
}

/// The overload state a listener's requests go by: the process's, or, for a
/// listener with `bypass_overload_manager`, one whose actions never fire.
/// (Connections are admitted by the process's state: [`Overload::admit`].)
pub fn of(bypass: bool) -> &'static Overload {
    static NEVER: std::sync::OnceLock<Overload> = std::sync::OnceLock::new();
    if bypass {
        let never = NEVER.get_or_init(Overload::default);
        return never;
    }
    get()
}

/// Sets the limits of `bootstrap` up; called once, before workers start.
pub fn init(bootstrap: &Bootstrap) {
    let om = bootstrap.overload_manager.as_ref();
    // The monitor wins over the deprecated runtime key, as in Envoy. Without
    // either the global count still runs (unlimited), so the runtime can set
    // a limit later.
    let monitor = om.and_then(|o| o.max_downstream_connections);
    let global = monitor
        .or(bootstrap.runtime.global_downstream_max_connections)
        .unwrap_or(u64::MAX);
    let listeners = bootstrap
        .runtime
        .listener_connection_limits
        .iter()
        .map(|(name, max)| (name.clone(), Limit::new(*max)))
        .collect();
    let _ = STATE.set(Overload {
        global: Some(Limit::new(global)),
        global_from_monitor: monitor.is_some(),
        listeners: ArcSwap::from_pointee(listeners),
        configured: om.is_some(),
        timer_scales: om.map(|o| o.timer_scales.clone()).unwrap_or_default(),
        ..Overload::default()
    });
}

impl Overload {
    /// The limit of listener `name` (unlimited while the runtime sets none;
    /// the runtime may set one later). Called on the main thread when a
    /// listener is built.
    pub fn listener_limit(&self, name: &str) -> Option<Arc<Limit>> {
        if let Some(l) = self.listeners.load().get(name) {
            return Some(Arc::clone(l));
        }
        let fresh = Limit::new(u64::MAX);
        // One entry per listener name ever built (LDS churn adds small ones).
        self.listeners.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.entry(name.to_string())
                .or_insert_with(|| Arc::clone(&fresh));
            m
        });
        self.listeners.load().get(name).cloned()
    }

    /// Applies the connection limits the runtime sets now (its layers read
    /// again after an RTDS update or `/runtime_modify`): a listener the
    /// runtime no longer names, and the global count without the key, go
    /// unlimited. Open connections stay; the new limits apply to new ones.
    pub fn set_runtime_limits(&self, global: Option<u64>, listeners: &HashMap<String, u64>) {
        if let Some(g) = &self.global
            && !self.global_from_monitor
        {
            g.max.store(global.unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        self.listeners.rcu(|m| {
            let mut m = HashMap::clone(m);
            for (name, limit) in &m {
                let max = listeners.get(name).copied().unwrap_or(u64::MAX);
                limit.max.store(max, Ordering::Relaxed);
            }
            for (name, max) in listeners {
                m.entry(name.clone()).or_insert_with(|| Limit::new(*max));
            }
            m
        });
    }

    /// Admits a new connection of a listener with `limit`: the slots it holds
    /// until it closes, or why it is refused.
    /// `ignore_global` (the listener's `ignore_global_conn_limit`) leaves
    /// the global limit out; `bypass` (its `bypass_overload_manager`),
    /// `stop_accepting_connections`.
    pub fn admit(
        &self,
        limit: Option<&Arc<Limit>>,
        ignore_global: bool,
        bypass: bool,
    ) -> Result<(Option<Slot>, Option<Slot>), Refused> {
        if !bypass && self.stop_connections.load(Ordering::Relaxed) {
            return Err(Refused::Overloaded);
        }
        let global = match &self.global {
            Some(g) if !ignore_global => Some(g.take().ok_or(Refused::Global)?),
            _ => None,
        };
        let listener = match limit {
            Some(l) => Some(l.take().ok_or(Refused::Listener)?),
            None => None,
        };
        Ok((global, listener))
    }

    /// `stop_accepting_requests` is active: new requests get 503.
    pub fn stop_requests(&self) -> bool {
        self.stop_requests.load(Ordering::Relaxed)
    }

    /// `timeout` of `timer` as `reduce_timeouts` has it now.
    pub fn scaled(&self, timer: ScaledTimer, timeout: Duration) -> Duration {
        let ppm = self.reduce_ppm.load(Ordering::Relaxed);
        if ppm == 0 {
            return timeout;
        }
        match self.timer_scales.iter().find(|s| s.timer == timer) {
            Some(s) => s.scale(timeout, ppm as f64 / 1e6),
            None => timeout,
        }
    }

    /// Resolves when `reduce_timeouts` changes state; never when no timer is
    /// scaled.
    pub async fn timers_changed(&self) {
        if self.timer_scales.is_empty() {
            return std::future::pending().await;
        }
        self.timers_changed.notified().await;
    }

    /// `disable_http_keepalive` is active: HTTP/1.1 responses close the connection.
    pub fn keepalive_disabled(&self) -> bool {
        self.disable_keepalive.load(Ordering::Relaxed)
    }

    /// Overload gauges as Envoy names them (`overload.<action>.active`, the
    /// monitor's `pressure` in percent).
    pub fn samples(&self) -> Vec<(String, u64)> {
        if !self.configured {
            return Vec::new();
        }
        let mut out = vec![(
            "overload.envoy.resource_monitors.fixed_heap.pressure".to_string(),
            self.pressure_ppm.load(Ordering::Relaxed) / 10_000,
        )];
        let reduce = self.reduce_ppm.load(Ordering::Relaxed);
        out.push((
            "overload.envoy.overload_actions.reduce_timeouts.scale_percent".to_string(),
            reduce / 10_000,
        ));
        out.push((
            "overload.envoy.overload_actions.reduce_timeouts.active".to_string(),
            u64::from(reduce >= 1_000_000),
        ));
        for (name, flag) in [
            ("stop_accepting_requests", &self.stop_requests),
            ("stop_accepting_connections", &self.stop_connections),
            ("disable_http_keepalive", &self.disable_keepalive),
            ("shrink_heap", &self.shrink_heap),
        ] {
            out.push((
                format!("overload.envoy.overload_actions.{name}.active"),
                u64::from(flag.load(Ordering::Relaxed)),
            ));
        }
        out.push((
            "overload.envoy.overload_actions.shrink_heap.shrink_count".to_string(),
            self.shrink_count.load(Ordering::Relaxed),
        ));
        out
    }

    /// Applies a heap pressure (resident bytes / max) to the actions.
    fn apply(&self, pressure: f64, actions: &[courier_config::overload::Action]) {
        // An action's state is its triggers' highest; the on/off actions act
        // when saturated (state 1), as Envoy's.
        let state = |kind: ActionKind| {
            actions
                .iter()
                .filter(|a| a.kind == kind)
                .map(|a| a.trigger.state(pressure))
                .fold(0.0f64, f64::max)
        };
        let fired = |kind: ActionKind| state(kind) >= 1.0;
        let reduce = (state(ActionKind::ReduceTimeouts) * 1e6) as u64;
        if self.reduce_ppm.swap(reduce, Ordering::Relaxed) != reduce {
            self.timers_changed.notify_waiters();
        }
        self.stop_requests
            .store(fired(ActionKind::StopAcceptingRequests), Ordering::Relaxed);
        self.stop_connections.store(
            fired(ActionKind::StopAcceptingConnections),
            Ordering::Relaxed,
        );
        self.disable_keepalive
            .store(fired(ActionKind::DisableHttpKeepalive), Ordering::Relaxed);
        self.shrink_heap
            .store(fired(ActionKind::ShrinkHeap), Ordering::Relaxed);
        self.pressure_ppm
            .store((pressure * 1e6) as u64, Ordering::Relaxed);
    }
}

/// How often `shrink_heap` releases memory while active (Envoy's heap shrinker timer).
const SHRINK_EVERY: Duration = Duration::from_secs(10);

/// The resident set size, from `VmRSS` in `/proc/self/status` (kB, so no page
/// size is needed).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `envoy.reloadable_features.fixed_heap_use_allocated`: the monitor reads
/// allocated bytes (else the resident set). A reloadable flag, as in Envoy:
/// RTDS and `/runtime_modify` change it for the next refresh.
static USE_ALLOCATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `fixed_heap_use_allocated` (at start and on each runtime change).
pub fn set_use_allocated(on: bool) {
    USE_ALLOCATED.store(on, Ordering::Relaxed);
}

/// What the fixed_heap monitor measures: with `fixed_heap_use_allocated`,
/// the bytes allocated (Envoy's `totalCurrentlyAllocated`); without, the
/// resident set (the closest courier has to tcmalloc's heap size less its
/// free and unmapped pages, which Envoy reads).
fn heap_bytes() -> Option<u64> {
    if USE_ALLOCATED.load(Ordering::Relaxed) {
        crate::heap_trim::allocated_bytes()
    } else {
        resident_bytes()
    }
}

/// Runs the heap monitor on the calling runtime (the main thread's), once per
/// `refresh_interval`, until the process exits.
pub fn spawn_monitor(bootstrap: &Bootstrap) {
    let Some(om) = bootstrap.overload_manager.clone() else {
        return;
    };
    let Some(max) = om.max_heap_bytes.filter(|m| *m > 0) else {
        return;
    };
    if om.actions.is_empty() {
        return;
    }
    let period = om.refresh_interval.max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        let mut last_shrink: Option<tokio::time::Instant> = None;
        loop {
            tick.tick().await;
            let Some(used) = heap_bytes() else {
                continue;
            };
            let state = get();
            state.apply(used as f64 / max as f64, &om.actions);
            // Envoy's heap shrinker releases free memory every 10 s while the
            // action is active.
            let now = tokio::time::Instant::now();
            if state.shrink_heap.load(Ordering::Relaxed)
                && last_shrink.is_none_or(|at| now >= at + SHRINK_EVERY)
            {
                last_shrink = Some(now);
                crate::heap_trim::release_free_memory();
                state.shrink_count.fetch_add(1, Ordering::Relaxed);
                // What was released counts at once, not a refresh later.
                if let Some(used) = heap_bytes() {
                    state.apply(used as f64 / max as f64, &om.actions);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use courier_config::overload::{Action, TimerMinimum, Trigger};

    /// RTDS and `/runtime_modify` change the limits of listeners already
    /// built: lower refuses new connections (open ones stay), none is unlimited.
    #[test]
    fn runtime_changes_limits_in_place() {
        let o = Overload {
            global: Some(Limit::new(u64::MAX)),
            ..Overload::default()
        };
        let l = o.listener_limit("l").unwrap();
        let a = o.admit(Some(&l), false, false).unwrap();
        let b = o.admit(Some(&l), false, false).unwrap();
        o.set_runtime_limits(Some(3), &HashMap::from([("l".to_string(), 1)]));
        assert_eq!(
            o.admit(Some(&l), false, false).unwrap_err(),
            Refused::Listener
        );
        drop((a, b));
        let c = o.admit(Some(&l), false, false).unwrap();
        // A listener built later gets the limit in force.
        o.set_runtime_limits(None, &HashMap::from([("m".to_string(), 0)]));
        let m = o.listener_limit("m").unwrap();
        assert_eq!(
            o.admit(Some(&m), false, false).unwrap_err(),
            Refused::Listener
        );
        // "l" is no longer named: unlimited again, and so is the global count.
        let more: Vec<_> = (0..5)
            .map(|_| o.admit(Some(&l), false, false).unwrap())
            .collect();
        drop((c, more));
    }

    #[test]
    fn limits_count_and_release() {
        let o = Overload {
            global: Some(Limit::new(2)),
            ..Overload::default()
        };
        let l = Limit::new(1);
        let a = o.admit(Some(&l), false, false).unwrap();
        assert_eq!(
            o.admit(Some(&l), false, false).unwrap_err(),
            Refused::Listener
        );
        let b = o.admit(None, false, false).unwrap();
        assert_eq!(o.admit(None, false, false).unwrap_err(), Refused::Global);
        // ignore_global_conn_limit: past the global limit, and not counted in it.
        let (global, _) = o.admit(None, true, false).unwrap();
        assert!(global.is_none());
        drop(a);
        drop(b);
        assert!(o.admit(Some(&l), false, false).is_ok());
        // stop_accepting_connections refuses all but a bypassing listener's.
        o.stop_connections.store(true, Ordering::Relaxed);
        assert_eq!(
            o.admit(None, false, false).unwrap_err(),
            Refused::Overloaded
        );
        assert!(o.admit(None, false, true).is_ok());
        assert!(!of(true).stop_requests() && !of(true).keepalive_disabled());
    }

    #[test]
    fn actions_follow_pressure() {
        let o = Overload::default();
        let actions = [
            Action {
                kind: ActionKind::DisableHttpKeepalive,
                trigger: Trigger::Threshold(0.5),
            },
            Action {
                kind: ActionKind::StopAcceptingRequests,
                trigger: Trigger::Threshold(0.9),
            },
        ];
        o.apply(0.6, &actions);
        assert!(o.keepalive_disabled() && !o.stop_requests());
        o.apply(0.95, &actions);
        assert!(o.stop_requests());
        o.apply(0.1, &actions);
        assert!(!o.keepalive_disabled() && !o.stop_requests());
        assert!(resident_bytes().unwrap() > 0);
    }

    #[test]
    fn reduce_timeouts_scales_idle_timers_with_pressure() {
        let o = Overload {
            timer_scales: vec![TimerScale {
                timer: ScaledTimer::ConnectionIdle,
                min: TimerMinimum::Absolute(Duration::from_secs(10)),
            }],
            ..Overload::default()
        };
        let actions = [
            Action {
                kind: ActionKind::ReduceTimeouts,
                trigger: Trigger::Scaled {
                    scaling: 0.5,
                    saturation: 0.75,
                },
            },
            // A scaled trigger fires an on/off action only once saturated.
            Action {
                kind: ActionKind::StopAcceptingRequests,
                trigger: Trigger::Scaled {
                    scaling: 0.5,
                    saturation: 0.75,
                },
            },
        ];
        let idle = |o: &Overload| o.scaled(ScaledTimer::ConnectionIdle, Duration::from_secs(110));
        o.apply(0.4, &actions);
        assert_eq!(idle(&o), Duration::from_secs(110));
        o.apply(0.625, &actions);
        assert_eq!(idle(&o), Duration::from_secs(60));
        assert!(!o.stop_requests());
        // The stream idle timer is not scaled here.
        assert_eq!(
            o.scaled(ScaledTimer::StreamIdle, Duration::from_secs(110)),
            Duration::from_secs(110)
        );
        o.apply(0.95, &actions);
        assert_eq!(idle(&o), Duration::from_secs(10));
        assert!(o.stop_requests());
        o.apply(0.1, &actions);
        assert_eq!(idle(&o), Duration::from_secs(110));
    }
}
