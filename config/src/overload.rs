//! `overload_manager`: the resource monitors, overload
//! actions courier implements for edge deployments (the runtime keys that
//! set connection limits are read by [`crate::runtime`]).
//!
//! Monitors: `fixed_heap` (courier measures its resident set, the closest
//! equivalent without tcmalloc's heap statistics) and
//! `global_downstream_max_connections`. Actions: `stop_accepting_requests`,
//! `stop_accepting_connections`, `disable_http_keepalive`, `shrink_heap`
//! (glibc's free memory released every 10 s while active) and
//! `reduce_timeouts` (the connection and stream idle timers), with threshold or
//! scaled triggers.

use crate::ctx::Ctx;
use crate::path::Path;
use crate::support::Support;
use envoy_types::pb::envoy::config::overload::v3 as pb;
use envoy_types::pb::envoy::extensions::resource_monitors::downstream_connections::v3::DownstreamConnectionsConfig;
use envoy_types::pb::envoy::extensions::resource_monitors::fixed_heap::v3::FixedHeapConfig;
use std::time::Duration;

/// Fields of the overload and runtime messages courier implements.
pub(crate) const SUPPORT: &[Support] = &[
    (
        "envoy.config.overload.v3.OverloadManager",
        &["refresh_interval", "resource_monitors", "actions"],
    ),
    (
        "envoy.config.overload.v3.ResourceMonitor",
        &["name", "typed_config"],
    ),
    (
        "envoy.config.overload.v3.OverloadAction",
        &["name", "triggers", "typed_config"],
    ),
    (
        "envoy.config.overload.v3.Trigger",
        &["name", "threshold", "scaled"],
    ),
    ("envoy.config.overload.v3.ThresholdTrigger", &["value"]),
    (
        "envoy.config.overload.v3.ScaledTrigger",
        &["scaling_threshold", "saturation_threshold"],
    ),
    (
        "envoy.config.overload.v3.ScaleTimersOverloadActionConfig",
        &["timer_scale_factors"],
    ),
    (
        "envoy.config.overload.v3.ScaleTimersOverloadActionConfig.ScaleTimer",
        &["timer", "min_timeout", "min_scale"],
    ),
    (
        "envoy.extensions.resource_monitors.fixed_heap.v3.FixedHeapConfig",
        &["max_heap_size_bytes"],
    ),
    (
        "envoy.extensions.resource_monitors.downstream_connections.v3.DownstreamConnectionsConfig",
        &["max_active_downstream_connections"],
    ),
];

/// The fixed-heap monitor's name.
pub const FIXED_HEAP: &str = "envoy.resource_monitors.fixed_heap";
/// The global connection monitor's name.
pub const GLOBAL_CONNECTIONS: &str = "envoy.resource_monitors.global_downstream_max_connections";

/// An overload action courier performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// New requests get 503 `envoy overloaded`.
    StopAcceptingRequests,
    /// New connections are closed as they are accepted.
    StopAcceptingConnections,
    /// HTTP/1.1 responses carry `connection: close`.
    DisableHttpKeepalive,
    /// Free memory is handed back to the system every 10 s while active.
    ShrinkHeap,
    /// The timers of [`OverloadManager::timer_scales`] shrink with the
    /// action's state, from their configured value towards their minimum.
    ReduceTimeouts,
}

/// When an action fires, given the heap pressure (0..1 of `max_heap_size_bytes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trigger {
    /// Active (state 1) at pressure >= the value, else inactive (0).
    Threshold(f64),
    /// State 0 below `scaling`, 1 (saturated) at `saturation` and above, in
    /// proportion between.
    Scaled {
        /// `scaling_threshold`.
        scaling: f64,
        /// `saturation_threshold`.
        saturation: f64,
    },
}

impl Trigger {
    /// The action's state (0..=1) at heap `pressure`, as Envoy's triggers.
    pub fn state(&self, pressure: f64) -> f64 {
        match *self {
            Trigger::Threshold(v) => f64::from(u8::from(pressure >= v)),
            Trigger::Scaled {
                scaling,
                saturation,
            } => {
                if pressure >= saturation {
                    1.0
                } else if pressure <= scaling {
                    0.0
                } else {
                    (pressure - scaling) / (saturation - scaling)
                }
            }
        }
    }
}

/// One action and the heap pressure that fires it.
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// What to do.
    pub kind: ActionKind,
    /// When.
    pub trigger: Trigger,
}

/// A timer `reduce_timeouts` scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaledTimer {
    /// `HTTP_DOWNSTREAM_CONNECTION_IDLE`: the connection manager's `idle_timeout`.
    ConnectionIdle,
    /// `HTTP_DOWNSTREAM_STREAM_IDLE`: `stream_idle_timeout` and routes' `idle_timeout`.
    StreamIdle,
}

/// How short a scaled timer may get.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimerMinimum {
    /// `min_timeout`.
    Absolute(Duration),
    /// `min_scale`, as a fraction (0..=1) of the configured timeout.
    Scale(f64),
}

/// One of `reduce_timeouts`' `timer_scale_factors`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimerScale {
    /// Which timer.
    pub timer: ScaledTimer,
    /// Its minimum.
    pub min: TimerMinimum,
}

impl TimerScale {
    /// `timeout` at action state `state` (0..=1): from `timeout` at 0 down to
    /// the minimum at 1, linearly, as Envoy's scaled range timers.
    pub fn scale(&self, timeout: Duration, state: f64) -> Duration {
        let min = match self.min {
            TimerMinimum::Absolute(d) => d.min(timeout),
            TimerMinimum::Scale(f) => timeout.mul_f64(f.clamp(0.0, 1.0)),
        };
        min + (timeout - min).mul_f64(1.0 - state.clamp(0.0, 1.0))
    }
}

/// The overload manager.
#[derive(Debug, Clone, PartialEq)]
pub struct OverloadManager {
    /// How often monitors are read (Envoy's default: 1 s).
    pub refresh_interval: Duration,
    /// `fixed_heap.max_heap_size_bytes`, if that monitor is configured.
    pub max_heap_bytes: Option<u64>,
    /// `global_downstream_max_connections` monitor's limit.
    pub max_downstream_connections: Option<u64>,
    /// Actions driven by the heap monitor.
    pub actions: Vec<Action>,
    /// The timers `reduce_timeouts` scales.
    pub timer_scales: Vec<TimerScale>,
}

/// Translates `overload_manager`.
pub fn translate(o: &pb::OverloadManager, path: &Path<'_>, ctx: &mut Ctx) -> OverloadManager {
    let refresh_interval = crate::core::duration_or(
        o.refresh_interval.as_ref(),
        Duration::from_secs(1),
        &path.field("refresh_interval"),
        ctx,
    );
    let mut out = OverloadManager {
        refresh_interval,
        max_heap_bytes: None,
        max_downstream_connections: None,
        actions: Vec::new(),
        timer_scales: Vec::new(),
    };
    let mp = path.field("resource_monitors");
    for (i, m) in o.resource_monitors.iter().enumerate() {
        let p = mp.index(i);
        let any = match &m.config_type {
            Some(pb::resource_monitor::ConfigType::TypedConfig(a)) => a,
            None => {
                ctx.error(&p.field("typed_config"), "is required");
                continue;
            }
        };
        let tp = p.field("typed_config");
        match m.name.as_str() {
            FIXED_HEAP => {
                if let Some(c) = crate::core::unpack::<FixedHeapConfig>(any, &tp, ctx) {
                    if c.max_heap_size_bytes == 0 {
                        ctx.error(&tp.field("max_heap_size_bytes"), "must be greater than 0");
                    }
                    out.max_heap_bytes = Some(c.max_heap_size_bytes);
                }
            }
            GLOBAL_CONNECTIONS => {
                if let Some(c) = crate::core::unpack::<DownstreamConnectionsConfig>(any, &tp, ctx) {
                    if c.max_active_downstream_connections <= 0 {
                        ctx.error(
                            &tp.field("max_active_downstream_connections"),
                            "must be greater than 0",
                        );
                    }
                    out.max_downstream_connections =
                        u64::try_from(c.max_active_downstream_connections).ok();
                }
            }
            other => ctx.unsupported(&p.field("name"), format!("resource monitor {other}")),
        }
    }
    let ap = path.field("actions");
    for (i, a) in o.actions.iter().enumerate() {
        let p = ap.index(i);
        let kind = match a.name.as_str() {
            "envoy.overload_actions.stop_accepting_requests" => ActionKind::StopAcceptingRequests,
            "envoy.overload_actions.stop_accepting_connections" => {
                ActionKind::StopAcceptingConnections
            }
            "envoy.overload_actions.disable_http_keepalive" => ActionKind::DisableHttpKeepalive,
            "envoy.overload_actions.shrink_heap" => ActionKind::ShrinkHeap,
            "envoy.overload_actions.reduce_timeouts" => ActionKind::ReduceTimeouts,
            other => {
                ctx.unsupported(&p.field("name"), format!("overload action {other}"));
                continue;
            }
        };
        match (kind, &a.typed_config) {
            (ActionKind::ReduceTimeouts, Some(any)) => {
                timer_scales(any, &p.field("typed_config"), &mut out.timer_scales, ctx);
            }
            (ActionKind::ReduceTimeouts, None) => {
                ctx.error(&p.field("typed_config"), "is required for reduce_timeouts");
            }
            (_, Some(_)) => ctx.unsupported(
                &p.field("typed_config"),
                format!("typed_config of {}", a.name),
            ),
            (_, None) => {}
        }
        let tp = p.field("triggers");
        if a.triggers.is_empty() {
            ctx.error(&tp, "at least one trigger is required");
        }
        for (j, t) in a.triggers.iter().enumerate() {
            let p = tp.index(j);
            if t.name != FIXED_HEAP {
                ctx.unsupported(
                    &p.field("name"),
                    format!("a trigger on {} (only {FIXED_HEAP})", t.name),
                );
                continue;
            }
            if out.max_heap_bytes.is_none() {
                ctx.error(
                    &p.field("name"),
                    format!("unknown resource monitor {}", t.name),
                );
            }
            match &t.trigger_oneof {
                Some(pb::trigger::TriggerOneof::Threshold(th)) => {
                    if !(0.0..=1.0).contains(&th.value) {
                        ctx.error(&p.field("threshold").field("value"), "must be in [0, 1]");
                    }
                    out.actions.push(Action {
                        kind,
                        trigger: Trigger::Threshold(th.value),
                    });
                }
                Some(pb::trigger::TriggerOneof::Scaled(sc)) => {
                    let sp = p.field("scaled");
                    let (scaling, saturation) = (sc.scaling_threshold, sc.saturation_threshold);
                    for (v, f) in [
                        (scaling, "scaling_threshold"),
                        (saturation, "saturation_threshold"),
                    ] {
                        if !(0.0..=1.0).contains(&v) {
                            ctx.error(&sp.field(f), "must be in [0, 1]");
                        }
                    }
                    if scaling >= saturation {
                        ctx.error(
                            &sp.field("scaling_threshold"),
                            "must be less than saturation_threshold",
                        );
                    }
                    out.actions.push(Action {
                        kind,
                        trigger: Trigger::Scaled {
                            scaling,
                            saturation,
                        },
                    });
                }
                None => ctx.error(&p, "a threshold is required"),
            }
        }
    }
    out
}

/// Translates `reduce_timeouts`' `ScaleTimersOverloadActionConfig`.
fn timer_scales(
    any: &envoy_types::pb::google::protobuf::Any,
    path: &Path<'_>,
    out: &mut Vec<TimerScale>,
    ctx: &mut Ctx,
) {
    use pb::scale_timers_overload_action_config::TimerType;
    use pb::scale_timers_overload_action_config::scale_timer::OverloadAdjust;
    let Some(c) = crate::core::unpack::<pb::ScaleTimersOverloadActionConfig>(any, path, ctx) else {
        return;
    };
    let fp = path.field("timer_scale_factors");
    if c.timer_scale_factors.is_empty() {
        ctx.error(&fp, "at least one timer is required");
    }
    for (i, t) in c.timer_scale_factors.iter().enumerate() {
        let p = fp.index(i);
        let timer = match TimerType::try_from(t.timer) {
            Ok(TimerType::HttpDownstreamConnectionIdle) => ScaledTimer::ConnectionIdle,
            Ok(TimerType::HttpDownstreamStreamIdle) => ScaledTimer::StreamIdle,
            Ok(TimerType::Unspecified) => {
                ctx.error(&p.field("timer"), "must be set");
                continue;
            }
            Ok(other) => {
                ctx.unsupported(
                    &p.field("timer"),
                    format!("scaling {}", other.as_str_name()),
                );
                continue;
            }
            Err(_) => {
                ctx.error(&p.field("timer"), format!("unknown timer {}", t.timer));
                continue;
            }
        };
        let min = match &t.overload_adjust {
            Some(OverloadAdjust::MinTimeout(d)) => {
                match crate::core::duration(d, &p.field("min_timeout"), ctx) {
                    Some(d) => TimerMinimum::Absolute(d),
                    None => continue,
                }
            }
            Some(OverloadAdjust::MinScale(pct)) => {
                if !(0.0..=100.0).contains(&pct.value) {
                    ctx.error(&p.field("min_scale").field("value"), "must be in [0, 100]");
                }
                TimerMinimum::Scale(pct.value / 100.0)
            }
            None => {
                ctx.error(&p, "min_timeout or min_scale is required");
                continue;
            }
        };
        if out.iter().any(|s| s.timer == timer) {
            ctx.error(&p.field("timer"), "is scaled twice");
            continue;
        }
        out.push(TimerScale { timer, min });
    }
}

#[cfg(test)]
mod tests;
