//! `slow_start_config` of the RoundRobin and LeastRequest policies, typed and
//! legacy.

use super::*;
use crate::cluster::SlowStart;

const P: &str = "static_resources.clusters[0]";
const TYPED: &str = "static_resources.clusters[0].load_balancing_policy.policies[0].typed_extension_config.typed_config";

fn typed(url: &str, slow: &str) -> String {
    with_ep(&format!(
        "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: p, typed_config: {{'@type': {url}, slow_start_config: {slow}}}}}}}]}}\n"
    ))
}

fn slow(yaml: &str) -> Option<SlowStart> {
    cluster(yaml).lb.slow_start
}

#[test]
fn typed_policies_take_slow_start_with_envoy_defaults() {
    for url in [
        crate::extensions::LB_ROUND_ROBIN,
        crate::extensions::LB_LEAST_REQUEST,
    ] {
        assert_eq!(
            slow(&typed(url, "{slow_start_window: 5s}")),
            Some(SlowStart {
                window: Duration::from_secs(5),
                aggression: 1.0,
                min_weight: 0.1,
            }),
            "{url}"
        );
        assert_eq!(
            slow(&typed(
                url,
                "{slow_start_window: 0.25s, aggression: {default_value: 2.5}, min_weight_percent: {value: 30}}"
            )),
            Some(SlowStart {
                window: Duration::from_millis(250),
                aggression: 2.5,
                min_weight: 0.3,
            }),
            "{url}"
        );
        // No window (or one under a millisecond, which Envoy truncates to
        // none): no slow start, as in Envoy.
        assert_eq!(slow(&typed(url, "{}")), None, "{url}");
        assert_eq!(
            slow(&typed(url, "{slow_start_window: 0.0005s}")),
            None,
            "{url}"
        );
        // Envoy falls back to an aggression of 1.0 when it is not positive.
        for a in ["0", "-2"] {
            assert_eq!(
                slow(&typed(
                    url,
                    &format!("{{slow_start_window: 1s, aggression: {{default_value: {a}}}}}")
                ))
                .map(|s| s.aggression),
                Some(1.0),
                "{url} {a}"
            );
        }
    }
    // The corpus' form: beside locality weighting.
    let c = cluster(&with_ep(&format!(
        "  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: p, typed_config: {{'@type': {}, locality_lb_config: {{locality_weighted_lb_config: {{}}}}, slow_start_config: {{slow_start_window: 5s}}}}}}}}]}}\n",
        crate::extensions::LB_LEAST_REQUEST
    )));
    assert!(c.lb.locality_weighted);
    assert_eq!(
        c.lb.slow_start.map(|s| s.window),
        Some(Duration::from_secs(5))
    );
    // Without slow_start_config: none.
    assert_eq!(cluster(&with_ep("")).lb.slow_start, None);
}

#[test]
fn typed_slow_start_refusals_name_the_field() {
    let url = crate::extensions::LB_ROUND_ROBIN;
    assert_eq!(
        errors(&typed(url, "{slow_start_window: -5s}")),
        [format!(
            "{TYPED}.slow_start_config.slow_start_window: must not be negative"
        )]
    );
    assert_eq!(
        errors(&typed(
            url,
            "{slow_start_window: 5s, min_weight_percent: {value: 150}}"
        )),
        [format!(
            "{TYPED}.slow_start_config.min_weight_percent.value: 150 is not a percentage (0 to 100)"
        )]
    );
    // The aggression's runtime override is not read: refused.
    assert_eq!(
        errors(&typed(
            url,
            "{slow_start_window: 5s, aggression: {default_value: 2, runtime_key: k}}"
        )),
        [format!(
            "{TYPED}.slow_start_config.aggression.runtime_key: runtime_key is not supported"
        )]
    );
}

#[test]
fn legacy_slow_start_configs() {
    let rr = "  round_robin_lb_config: {slow_start_config: {slow_start_window: 3s, aggression: {default_value: 0.5}}}\n";
    assert_eq!(
        slow(&with_ep(rr)),
        Some(SlowStart {
            window: Duration::from_secs(3),
            aggression: 0.5,
            min_weight: 0.1,
        })
    );
    let lr = "  lb_policy: LEAST_REQUEST\n  least_request_lb_config: {choice_count: 3, slow_start_config: {slow_start_window: 2s, min_weight_percent: {value: 50}}}\n";
    let c = cluster(&with_ep(lr));
    assert_eq!(
        c.lb.policy,
        LbPolicy::LeastRequest {
            choice_count: 3,
            active_request_bias: 1.0
        }
    );
    assert_eq!(
        c.lb.slow_start,
        Some(SlowStart {
            window: Duration::from_secs(2),
            aggression: 1.0,
            min_weight: 0.5,
        })
    );
    assert_eq!(
        errors(&with_ep(&format!("  lb_policy: RANDOM\n{rr}"))),
        [format!(
            "{P}.round_robin_lb_config: only applies to lb_policy ROUND_ROBIN"
        )]
    );
    assert_eq!(
        errors(&with_ep(
            "  round_robin_lb_config: {slow_start_config: {slow_start_window: -1s}}\n"
        )),
        [format!(
            "{P}.round_robin_lb_config.slow_start_config.slow_start_window: must not be negative"
        )]
    );
    // The typed policy supersedes the legacy settings: refused beside it.
    assert_eq!(
        errors(&with_ep(&format!(
            "{rr}  load_balancing_policy: {{policies: [{{typed_extension_config: {{name: p, typed_config: {{'@type': {}}}}}}}]}}\n",
            crate::extensions::LB_ROUND_ROBIN
        ))),
        [format!(
            "{P}.round_robin_lb_config: cannot be combined with load_balancing_policy, which supersedes it"
        )]
    );
}

#[test]
fn slow_start_factor_follows_envoy() {
    let s = SlowStart {
        window: Duration::from_secs(10),
        aggression: 1.0,
        min_weight: 0.1,
    };
    let ms = Duration::from_millis;
    // Under min_weight: min_weight.
    assert_eq!(s.factor(ms(0)), 0.1);
    assert_eq!(s.factor(ms(500)), 0.1);
    // Linear above it.
    assert!((s.factor(ms(2500)) - 0.25).abs() < 1e-12);
    assert!((s.factor(ms(9999)) - 0.9999).abs() < 1e-12);
    // The window's end and after: full weight.
    assert_eq!(s.factor(ms(10_000)), 1.0);
    assert_eq!(s.factor(ms(60_000)), 1.0);
    // Aggression 2: the square root of the time factor.
    let a = SlowStart {
        aggression: 2.0,
        min_weight: 0.0,
        ..s
    };
    assert!((a.factor(ms(2500)) - 0.5).abs() < 1e-12);
    // At least one millisecond counts (Envoy's max(1 ms, elapsed)).
    assert!((a.factor(ms(0)) - (1.0f64 / 10_000.0).sqrt()).abs() < 1e-12);
}
