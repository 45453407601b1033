//! Stats: counters per worker, written only by their worker (relaxed atomics, so
//! no contention), summed across workers when admin is scraped. Names follow Envoy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter written by one worker.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Subtracts one (for gauges).
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The connection manager's stats of one listener's HCM (`http.<stat_prefix>.*`).
#[derive(Debug, Default)]
pub struct HcmStats {
    /// `downstream_cx_total`.
    pub cx_total: Counter,
    /// `downstream_cx_active` (a gauge).
    pub cx_active: Counter,
    /// `downstream_rq_total`.
    pub rq_total: Counter,
    /// `downstream_rq_1xx` .. `downstream_rq_5xx`.
    pub rq_xx: [Counter; 5],
    /// `no_route`.
    pub no_route: Counter,
    /// `rq_direct_response`.
    pub rq_direct_response: Counter,
    /// `rq_redirect`.
    pub rq_redirect: Counter,
}

impl HcmStats {
    /// Counts a response by status class.
    pub fn response(&self, status: u16) {
        if let Some(c) = self.rq_xx.get(usize::from(status / 100).wrapping_sub(1)) {
            c.inc();
        }
    }
}

/// One worker's stats: one [`HcmStats`] per filter chain of each listener.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// By listener index, then by filter chain (`filter_chain::chain_at` order,
    /// the default chain last), with the chain's HCM stat prefix. Chains sharing
    /// a prefix share their stat names, summed on scrape, as in Envoy.
    pub listeners: Vec<Vec<(String, Arc<HcmStats>)>>,
}

impl WorkerStats {
    /// The stats of a listener's filter chain (detached ones if the config
    /// changed under the connection).
    pub fn hcm(&self, listener: usize, chain: usize) -> Arc<HcmStats> {
        self.listeners
            .get(listener)
            .and_then(|chains| chains.get(chain))
            .map(|(_, s)| Arc::clone(s))
            .unwrap_or_default()
    }
}

/// A stat name and its value summed over workers.
pub type Sample = (String, u64);

/// Sums every worker's stats into Envoy-named samples, sorted by name.
pub fn collect(workers: &[Arc<WorkerStats>]) -> Vec<Sample> {
    let mut out: std::collections::BTreeMap<String, u64> = Default::default();
    for w in workers {
        for (prefix, s) in w.listeners.iter().flatten() {
            let mut add =
                |name: &str, v: u64| *out.entry(format!("http.{prefix}.{name}")).or_default() += v;
            add("downstream_cx_total", s.cx_total.get());
            add("downstream_cx_active", s.cx_active.get());
            add("downstream_rq_total", s.rq_total.get());
            for (i, c) in s.rq_xx.iter().enumerate() {
                add(&format!("downstream_rq_{}xx", i + 1), c.get());
            }
            add("no_route", s.no_route.get());
            add("rq_direct_response", s.rq_direct_response.get());
            add("rq_redirect", s.rq_redirect.get());
        }
    }
    out.into_iter().collect()
}

/// Renders samples in Envoy's `/stats` text form (`name: value`).
pub fn render_text(samples: &[Sample]) -> String {
    let mut s = String::new();
    for (name, v) in samples {
        s.push_str(name);
        s.push_str(": ");
        s.push_str(&v.to_string());
        s.push('\n');
    }
    s
}

/// Renders samples in Prometheus text form with Envoy's tag extraction for the
/// HCM stats (`http.<prefix>.x` → `envoy_http_x{envoy_http_conn_manager_prefix="<prefix>"}`,
/// and the `_Nxx` classes → `envoy_response_code_class`).
pub fn render_prometheus(samples: &[Sample]) -> String {
    let mut s = String::new();
    let mut last_family = String::new();
    for (name, v) in samples {
        let Some(rest) = name.strip_prefix("http.") else {
            continue;
        };
        let Some((prefix, stat)) = rest.split_once('.') else {
            continue;
        };
        let (family, extra) = match stat
            .strip_prefix("downstream_rq_")
            .and_then(|c| c.strip_suffix("xx"))
        {
            Some(class) if class.len() == 1 => (
                "downstream_rq_xx".to_string(),
                format!(",envoy_response_code_class=\"{class}\""),
            ),
            _ => (stat.to_string(), String::new()),
        };
        let family = format!("envoy_http_{family}");
        if family != last_family {
            let kind = if stat.ends_with("_active") {
                "gauge"
            } else {
                "counter"
            };
            s.push_str(&format!("# TYPE {family} {kind}\n"));
            last_family.clone_from(&family);
        }
        s.push_str(&format!(
            "{family}{{envoy_http_conn_manager_prefix=\"{prefix}\"{extra}}} {v}\n"
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_workers_and_renders_envoy_names() {
        let mk = || {
            let s = Arc::new(HcmStats::default());
            Arc::new(WorkerStats {
                listeners: vec![vec![("ingress".into(), s)]],
            })
        };
        let (a, b) = (mk(), mk());
        a.hcm(0, 0).rq_total.inc();
        b.hcm(0, 0).rq_total.inc();
        b.hcm(0, 0).response(204);
        let samples = collect(&[a, b]);
        let text = render_text(&samples);
        assert!(
            text.contains("http.ingress.downstream_rq_total: 2\n"),
            "{text}"
        );
        assert!(
            text.contains("http.ingress.downstream_rq_2xx: 1\n"),
            "{text}"
        );
        let prom = render_prometheus(&samples);
        assert!(
            prom.contains(
                "envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix=\"ingress\"} 2\n"
            ),
            "{prom}"
        );
        assert!(prom.contains(
            "envoy_http_downstream_rq_xx{envoy_http_conn_manager_prefix=\"ingress\",envoy_response_code_class=\"2\"} 1\n"
        ), "{prom}");
    }
}
