//! Slow start on tokio's paused clock: a host that joins gets the share
//! Envoy's formula gives its weight, rising over the window.

use super::*;
use crate::upstream::lb::choose;
use courier_config::cluster::LoadBalancer;
use std::net::SocketAddr;
use std::time::Duration;

const WINDOW: Duration = Duration::from_secs(10);

fn host(port: u16) -> Arc<Host> {
    Arc::new(Host::new(
        SocketAddr::from(([127, 0, 0, 1], port)),
        String::new(),
        1,
        true,
    ))
}

fn lb(policy: LbPolicy, aggression: f64, min_weight: f64) -> LoadBalancer {
    LoadBalancer {
        policy,
        healthy_panic_threshold: 50.0,
        locality_weighted: false,
        zone_aware: Default::default(),
        cluster_hash_policy: Vec::new(),
        slow_start: Some(SlowStart {
            window: WINDOW,
            aggression,
            min_weight,
        }),
    }
}

/// The defaults with a 10 s window.
fn slow() -> SlowStart {
    SlowStart {
        window: WINDOW,
        aggression: 1.0,
        min_weight: 0.1,
    }
}

/// Envoy's factor, written out: `max(min_weight, (max(1 ms, t) /
/// window)^(1 / aggression))` inside the window, else 1.
fn envoy_factor(t: Duration, aggression: f64, min_weight: f64) -> f64 {
    if t >= WINDOW {
        return 1.0;
    }
    let tf = t.as_millis().max(1) as f64 / WINDOW.as_millis() as f64;
    tf.powf(1.0 / aggression).max(min_weight)
}

/// Hosts on ports 1 and 2 that joined two windows ago, and host 3 joining
/// now: the set with all three.
async fn with_new_host() -> HostSet {
    let (a, b) = (host(1), host(2));
    let old = HostSet::new(vec![vec![Arc::clone(&a), Arc::clone(&b)]], 140);
    refresh(&old, &slow(), Instant::now(), true);
    tokio::time::advance(2 * WINDOW).await;
    let set = HostSet::new(vec![vec![a, b, host(3)]], 140);
    refresh(&set, &slow(), Instant::now(), false);
    set
}

/// Picks of port 3 among `n` picks, without the clock moving.
fn new_host_picks(set: &HostSet, l: &LoadBalancer, cluster: usize, n: usize) -> usize {
    (0..n)
        .filter(|_| choose(set, l, cluster).is_some_and(|h| h.address.port() == 3))
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_new_host_ramps_up_over_the_window_round_robin() {
    let set = with_new_host().await;
    let l = lb(LbPolicy::RoundRobin, 1.0, 0.1);
    let n = 1000;
    let mut shares = Vec::new();
    for step in 0..=12 {
        let t = Duration::from_secs(step);
        let f = envoy_factor(t, 1.0, 0.1);
        // The two old hosts keep weight 1 each.
        let expected = n as f64 * f / (2.0 + f);
        let got = new_host_picks(&set, &l, 9000 + step as usize, n);
        assert!(
            (got as f64 - expected).abs() <= 2.0,
            "at {t:?}: {got} picks of {n}, Envoy's weights give {expected:.1}"
        );
        shares.push(got);
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    // 10 % of its weight for its first second, then rising, then a third.
    assert!(shares[..=10].windows(2).all(|w| w[0] <= w[1]), "{shares:?}");
    assert_eq!(shares[0], shares[1]);
    assert!(shares[10..].iter().all(|&s| (333..=334).contains(&s)));
}

#[tokio::test(start_paused = true)]
async fn aggression_and_min_weight_shape_the_ramp() {
    let set = with_new_host().await;
    let l = lb(LbPolicy::RoundRobin, 2.0, 0.3);
    let n = 1000;
    let mut elapsed = Duration::ZERO;
    // sqrt(t / 10 s), at least 0.3: 0.3 until 0.9 s, then 0.316 at 1 s,
    // 0.632 at 4 s, 0.949 at 9 s.
    for step in [0u64, 1, 4, 9] {
        let t = Duration::from_secs(step);
        tokio::time::advance(t - elapsed).await;
        elapsed = t;
        let f = envoy_factor(t, 2.0, 0.3);
        let expected = n as f64 * f / (2.0 + f);
        let got = new_host_picks(&set, &l, 9100 + step as usize, n);
        assert!(
            (got as f64 - expected).abs() <= 2.0,
            "at {t:?}: {got} of {n}, expected {expected:.1}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn least_request_weighs_active_requests_and_slow_start() {
    let set = with_new_host().await;
    let l = lb(
        LbPolicy::LeastRequest {
            choice_count: 2,
            active_request_bias: 1.0,
        },
        1.0,
        0.1,
    );
    // Host 1 has one request in flight: weight 1 / (1 + 1).
    let busy = Arc::clone(&set.priorities[0].all()[0]);
    let _guard = busy.start_request();
    tokio::time::advance(Duration::from_secs(4)).await;
    let n = 1000;
    let f = envoy_factor(Duration::from_secs(4), 1.0, 0.1);
    let expected = n as f64 * f / (0.5 + 1.0 + f);
    let got = new_host_picks(&set, &l, 9200, n);
    assert!(
        (got as f64 - expected).abs() <= 2.0,
        "{got} of {n}, expected {expected:.1}"
    );
}

#[tokio::test(start_paused = true)]
async fn hosts_present_at_start_ramp_together_and_the_window_ends() {
    // Every host joins at once: equal factors, an even split (Envoy's hosts
    // at cluster start are all in slow start).
    let set = HostSet::new(vec![vec![host(1), host(2), host(3)]], 140);
    refresh(&set, &slow(), Instant::now(), false);
    tokio::time::advance(Duration::from_secs(3)).await;
    let l = lb(LbPolicy::RoundRobin, 1.0, 0.1);
    assert_eq!(new_host_picks(&set, &l, 9300, 300), 100);
    // A host not usable (panic aside) is not in slow start: a host turned
    // healthy later starts then, not when it joined.
    let late = Arc::new(Host::new(
        SocketAddr::from(([127, 0, 0, 1], 3)),
        String::new(),
        1,
        false,
    ));
    let set = HostSet::new(vec![vec![host(1), host(2), Arc::clone(&late)]], 140);
    refresh(&set, &slow(), Instant::now(), false);
    assert_eq!(late.slow_start_since(), None);
    // Past the window nothing is in slow start: the usual pick.
    let set = with_new_host().await;
    tokio::time::advance(WINDOW).await;
    let hosts = set.priorities[0].healthy();
    assert_eq!(
        pick(
            hosts,
            &slow(),
            &LbPolicy::RoundRobin,
            (0, 0, 0),
            Instant::now(),
            false
        ),
        None
    );
    assert_eq!(new_host_picks(&set, &l, 9301, 300), 100);
}

#[tokio::test(start_paused = true)]
async fn an_eds_update_adds_a_host_in_slow_start_and_keeps_the_others() {
    use crate::upstream::host::{static_hosts_reusing, tests::assignment};
    use crate::upstream::socket::HostSockets;
    let la = assignment(&[(None, None, &[1, 2])], 140);
    let first = static_hosts_reusing(&la, None, false, &HostSockets::NONE);
    refresh(&first, &slow(), Instant::now(), true);
    let joined = Instant::now();
    tokio::time::advance(2 * WINDOW).await;
    // Host 3 joins; host 2's weight changes (a new host object, which keeps
    // its slow start time as Envoy keeps the host).
    let mut la = assignment(&[(None, None, &[1, 2, 3])], 140);
    la.priorities[0].localities[0].endpoints[1].weight = 2;
    let second = static_hosts_reusing(&la, Some(&first), false, &HostSockets::NONE);
    refresh(&second, &slow(), Instant::now(), false);
    let hosts = second.priorities[0].all();
    assert_eq!(hosts[1].weight, 2);
    assert_eq!(hosts[0].slow_start_since(), Some(joined));
    assert_eq!(hosts[1].slow_start_since(), Some(joined));
    assert_eq!(hosts[2].slow_start_since(), Some(Instant::now()));
    // Weights 1, 2 and 0.1 x 1: host 3 gets 1 in 31.
    let l = lb(LbPolicy::RoundRobin, 1.0, 0.1);
    assert_eq!(new_host_picks(&second, &l, 9400, 310), 10);
}

#[tokio::test(start_paused = true)]
async fn least_request_picks_by_weight_until_a_set_is_published_outside_the_window() {
    let l = lb(
        LbPolicy::LeastRequest {
            choice_count: 2,
            active_request_bias: 1.0,
        },
        1.0,
        0.1,
    );
    let set = HostSet::new(vec![vec![host(1), host(2), host(3)]], 140);
    // A new balancer: Envoy builds its EDF schedulers and keeps them.
    refresh(&set, &slow(), Instant::now(), true);
    assert!(set.weighted_picks());
    tokio::time::advance(2 * WINDOW).await;
    // Host 3 busy: weights 1, 1 and 1 / 2, so it gets exactly 1 in 5 by
    // weight (sampling two hosts would give it about 1 in 9).
    let busy = Arc::clone(&set.priorities[0].all()[2]);
    let guard = busy.start_request();
    assert_eq!(new_host_picks(&set, &l, 9500, 500), 100);
    // The next set, published outside every window: sampling again.
    let next = HostSet::new(vec![set.priorities[0].all().to_vec()], 140);
    refresh(&next, &slow(), Instant::now(), false);
    assert!(!next.weighted_picks());
    let picks = new_host_picks(&next, &l, 9501, 900);
    assert!((60..=140).contains(&picks), "{picks}");
    drop(guard);
}
