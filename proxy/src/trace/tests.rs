use super::*;
use courier_config::tracing::Fraction;

fn tracing(random: u64, overall: u64) -> Tracing {
    Tracing {
        client_sampling: Fraction::ALL,
        random_sampling: Fraction {
            numerator: random,
            denominator: 10_000,
        },
        overall_sampling: Fraction {
            numerator: overall,
            denominator: 10_000,
        },
        custom_tags: Vec::new(),
        max_path_tag_length: 256,
        spawn_upstream_span: true,
        provider: None,
    }
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn rid(h: &HeaderMap) -> String {
    h.get("x-request-id").unwrap().to_str().unwrap().to_string()
}

#[test]
fn decisions_pack_the_reason_into_the_request_id() {
    let stats = TracingStats::default();
    // Random sampling at 100 %: '9'.
    let mut h = headers(&[("x-request-id", "00000001-2222-4333-8444-555555555555")]);
    assert!(decide(&tracing(10_000, 10_000), None, &mut h, &stats));
    assert_eq!(rid(&h), "00000001-2222-9333-8444-555555555555");
    // At 0 %: untouched, not traced.
    let mut h = headers(&[("x-request-id", "00000001-2222-4333-8444-555555555555")]);
    assert!(!decide(&tracing(0, 10_000), None, &mut h, &stats));
    assert_eq!(rid(&h), "00000001-2222-4333-8444-555555555555");
    // The id's first 8 hex digits mod 10 000 against the fraction: 0x1388 = 5000.
    let mut h = headers(&[("x-request-id", "00001388-2222-4333-8444-555555555555")]);
    assert!(!decide(&tracing(5000, 10_000), None, &mut h, &stats));
    let mut h = headers(&[("x-request-id", "00001387-2222-4333-8444-555555555555")]);
    assert!(decide(&tracing(5000, 10_000), None, &mut h, &stats));
    // Forced ('a') and client ('b'); an id already marked keeps its reason.
    let mut h = headers(&[
        ("x-request-id", "00000001-2222-4333-8444-555555555555"),
        ("x-envoy-force-trace", "1"),
    ]);
    assert!(decide(&tracing(0, 10_000), None, &mut h, &stats));
    assert_eq!(&rid(&h)[14..15], "a");
    let mut h = headers(&[
        ("x-request-id", "00000001-2222-4333-8444-555555555555"),
        ("x-client-trace-id", "c"),
    ]);
    assert!(decide(&tracing(0, 10_000), None, &mut h, &stats));
    assert_eq!(&rid(&h)[14..15], "b");
    let mut h = headers(&[("x-request-id", "00000001-2222-9333-8444-555555555555")]);
    assert!(decide(&tracing(0, 10_000), None, &mut h, &stats));
    // Overall sampling vetoes, marking '4'.
    let mut h = headers(&[("x-request-id", "00000001-2222-9333-8444-555555555555")]);
    assert!(!decide(&tracing(10_000, 0), None, &mut h, &stats));
    assert_eq!(&rid(&h)[14..15], "4");
    // An id whose first 8 characters are not hex is not read: not traced, even
    // with a reason packed.
    let mut h = headers(&[("x-request-id", "zzzzzzzz-2222-9333-8444-555555555555")]);
    assert!(!decide(&tracing(10_000, 10_000), None, &mut h, &stats));
    // No request id, or one that is not a UUID: not traced.
    assert!(!decide(
        &tracing(10_000, 10_000),
        None,
        &mut HeaderMap::new(),
        &stats
    ));
    let mut h = headers(&[("x-request-id", "abc")]);
    assert!(!decide(&tracing(10_000, 10_000), None, &mut h, &stats));
    assert_eq!(stats.random_sampling.get(), 3);
    assert_eq!(stats.service_forced.get(), 1);
    assert_eq!(stats.client_enabled.get(), 1);
    assert_eq!(stats.not_traceable.get(), 6);
}

#[test]
fn route_sampling_replaces_the_managers() {
    let stats = TracingStats::default();
    let route = RouteTracing {
        client_sampling: Fraction::ALL,
        random_sampling: Fraction {
            numerator: 0,
            denominator: 100,
        },
        overall_sampling: Fraction::ALL,
        custom_tags: Vec::new(),
    };
    let mut h = headers(&[("x-request-id", "00000001-2222-4333-8444-555555555555")]);
    assert!(!decide(
        &tracing(10_000, 10_000),
        Some(&route),
        &mut h,
        &stats
    ));
}

#[test]
fn traceparents_parse_as_w3c() {
    let ok = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (t, s, sampled) = parse_traceparent(ok).unwrap();
    assert_eq!(t[0], 0x0a);
    assert_eq!(s[7], 0x31);
    assert!(sampled);
    assert!(
        !parse_traceparent(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
            .unwrap()
            .2
    );
    for bad in [
        &b"zz"[..],
        b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
        b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        b"00-0af7651916cd43dd8448eb211c80319x-b7ad6b7169203331-01",
        b"00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    ] {
        assert!(parse_traceparent(bad).is_err());
    }
    let v = traceparent(&t, &s, true);
    assert_eq!(v.as_bytes(), ok);
}

#[test]
fn samplers() {
    let id = [0u8; 16];
    let ratio = |n| {
        Sampler::TraceIdRatio(Fraction {
            numerator: n,
            denominator: 100,
        })
    };
    assert!(!sample(&ratio(0), None, &id));
    assert!(sample(&ratio(100), None, &id));
    let parent = Sampler::ParentBased(Box::new(ratio(0)));
    assert!(sample(&parent, Some(true), &id));
    assert!(!sample(&parent, Some(false), &id));
    assert!(!sample(&parent, None, &id));
    // The first 8 bytes little-endian: 0x..05 mod 100 = 5 (the rest zero).
    let mut id = [0u8; 16];
    id[0] = 5;
    assert!(sample(&ratio(6), None, &id));
    assert!(!sample(&ratio(5), None, &id));
}
