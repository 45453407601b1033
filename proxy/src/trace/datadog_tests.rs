use super::*;
use courier_config::tracing::Datadog;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

fn trace() -> Trace {
    Trace {
        config: Arc::new(Datadog {
            cluster: "agent".into(),
            hostname: "agent".into(),
            service: "svc".into(),
        }),
        priority: 1,
        agent_rate: None,
        trace_tags: Vec::new(),
        origin: None,
        root_tags: Vec::new(),
        other_tracestate: None,
        other_dd_tracestate: None,
    }
}

fn injected(i: Inject) -> Vec<(String, String)> {
    let Inject::Datadog(h) = i else {
        panic!("not Datadog headers");
    };
    h.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
        .collect()
}

#[test]
fn datadog_headers_with_tags_and_origin() {
    let e = extract(&headers(&[
        ("x-datadog-trace-id", "12345"),
        ("x-datadog-parent-id", "678"),
        ("x-datadog-sampling-priority", "1"),
        ("x-datadog-origin", "synthetics"),
        (
            "x-datadog-tags",
            "_dd.p.dm=-4,_dd.p.tid=640cfd8d00000000,other=x",
        ),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(e.trace_id, Some((0x640cfd8d00000000, 12345)));
    assert_eq!(e.parent_id, Some(678));
    assert_eq!(e.priority, Some(1));
    assert_eq!(e.origin.as_deref(), Some("synthetics"));
    // Only `_dd.p.*` tags, in their order.
    assert_eq!(
        e.trace_tags,
        vec![
            ("_dd.p.dm".to_string(), "-4".to_string()),
            ("_dd.p.tid".to_string(), "640cfd8d00000000".to_string())
        ]
    );
    let mut t = trace();
    t.trace_tags = e.trace_tags;
    t.origin = e.origin;
    // What Envoy 1.40 sent its upstream for these headers.
    assert_eq!(
        injected(t.inject((0x640cfd8d00000000, 12345), 0x2e13d2639757ded4)),
        vec![
            ("x-datadog-trace-id".into(), "12345".into()),
            ("x-datadog-parent-id".into(), "3320228675484901076".into()),
            ("x-datadog-sampling-priority".into(), "1".into()),
            ("x-datadog-origin".into(), "synthetics".into()),
            (
                "x-datadog-tags".into(),
                "_dd.p.dm=-4,_dd.p.tid=640cfd8d00000000".into()
            ),
            (
                "traceparent".into(),
                "00-640cfd8d000000000000000000003039-2e13d2639757ded4-01".into()
            ),
            (
                "tracestate".into(),
                "dd=s:1;p:2e13d2639757ded4;o:synthetics;t.dm:-4".into()
            ),
        ]
    );
}

#[test]
fn w3c_context_with_datadog_tracestate() {
    let e = extract(&headers(&[
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("tracestate", "dd=s:2;o:rum;t.usr.id:a~b;x:y,foo=bar"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(e.trace_id, Some((0x0af7651916cd43dd, 0x8448eb211c80319c)));
    assert_eq!(e.parent_id, Some(0xb7ad6b7169203331));
    assert_eq!(e.priority, Some(2));
    assert_eq!(e.origin.as_deref(), Some("rum"));
    assert_eq!(e.w3c_parent.as_deref(), Some("0000000000000000"));
    assert_eq!(e.other_tracestate.as_deref(), Some("foo=bar"));
    assert_eq!(e.other_dd_tracestate.as_deref(), Some("x:y"));
    let mut t = trace();
    t.priority = 2;
    t.trace_tags = e.trace_tags;
    t.origin = e.origin;
    t.other_tracestate = e.other_tracestate;
    t.other_dd_tracestate = e.other_dd_tracestate;
    let h = injected(t.inject((0x0af7651916cd43dd, 0x8448eb211c80319c), 0x508a3ca5ec4f2427));
    assert_eq!(
        h.iter().find(|(k, _)| k == "tracestate").unwrap().1,
        "dd=s:2;p:508a3ca5ec4f2427;o:rum;t.usr.id:a~b;x:y,foo=bar"
    );
    assert_eq!(
        h.iter().find(|(k, _)| k == "x-datadog-tags").unwrap().1,
        "_dd.p.usr.id=a=b,_dd.p.tid=0af7651916cd43dd"
    );
}

#[test]
fn a_sampled_flag_disagreeing_with_s_keeps_the_flag() {
    let e = extract(&headers(&[
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        ),
        ("tracestate", "dd=s:2"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(e.priority, Some(0));
}

#[test]
fn unusable_contexts() {
    // No context at all.
    assert_eq!(extract(&HeaderMap::new()), Ok(None));
    // Not a number, a parent without a trace, a trace without a parent or
    // origin, a zero trace id: errors (a new trace).
    for bad in [
        &[("x-datadog-trace-id", "abc"), ("x-datadog-parent-id", "1")][..],
        &[("x-datadog-parent-id", "1")][..],
        &[("x-datadog-trace-id", "1")][..],
        &[("x-datadog-trace-id", "0"), ("x-datadog-parent-id", "1")][..],
        &[
            ("x-datadog-trace-id", "1"),
            ("x-datadog-parent-id", "1"),
            ("x-datadog-sampling-priority", "x"),
        ][..],
    ] {
        assert_eq!(extract(&headers(bad)), Err(()), "{bad:?}");
    }
    // A trace id with an origin is a root.
    let e = extract(&headers(&[
        ("x-datadog-trace-id", "7"),
        ("x-datadog-origin", "synthetics"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(e.parent_id, Some(0));
    // A traceparent that cannot be read is no context.
    assert_eq!(extract(&headers(&[("traceparent", "00-zz")])), Ok(None));
    // Undecodable trace tags: the context, with a propagation error.
    let e = extract(&headers(&[
        ("x-datadog-trace-id", "1"),
        ("x-datadog-parent-id", "2"),
        ("x-datadog-tags", "nokey"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(
        e.span_tags,
        vec![(
            "_dd.propagation_error".to_string(),
            "decoding_error".to_string()
        )]
    );
}

#[test]
fn datadog_wins_and_w3c_of_the_same_trace_lends_its_parent() {
    let e = extract(&headers(&[
        ("x-datadog-trace-id", "1"),
        ("x-datadog-parent-id", "2"),
        (
            "traceparent",
            "00-00000000000000000000000000000001-0000000000000003-01",
        ),
        ("tracestate", "dd=p:00000000000000aa,other=1"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(e.parent_id, Some(3));
    assert_eq!(e.w3c_parent.as_deref(), Some("00000000000000aa"));
    assert_eq!(e.other_tracestate.as_deref(), Some("other=1"));
    // Another trace's W3C context is ignored.
    let e = extract(&headers(&[
        ("x-datadog-trace-id", "1"),
        ("x-datadog-parent-id", "2"),
        (
            "traceparent",
            "00-00000000000000000000000000000009-0000000000000003-01",
        ),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((e.parent_id, e.w3c_parent), (Some(2), None));
}

#[test]
fn rates_and_the_knuth_sampler() {
    assert_eq!(format_rate(1.0), "1");
    assert_eq!(format_rate(0.5), "0.5");
    assert_eq!(format_rate(0.123456789), "0.123457");
    assert!(keeps(u64::MAX, 1.0));
    assert!(!keeps(1, 0.0));
    // 1 * 1111111111111111111 is below half of u64::MAX.
    assert!(keeps(1, 0.5));
    assert!(!keeps(9, 0.5));
}

#[test]
fn a_span_as_msgpack() {
    let s = DdSpan {
        service: "s".into(),
        resource: "ingress".into(),
        trace_id: 1,
        span_id: 2,
        parent_id: 0,
        start: 3,
        duration: 4,
        error: true,
        meta: vec![("k".into(), "v".into())],
        metrics: vec![("m".into(), 1.5)],
    };
    let mut out = Vec::new();
    s.encode(&mut out);
    // map32 of 12, then "service" as str32.
    assert_eq!(&out[..5], &[0xdf, 0, 0, 0, 12]);
    assert_eq!(&out[5..10], &[0xdb, 0, 0, 0, 7]);
    assert_eq!(&out[10..17], b"service");
    let find = |key: &str| {
        let mut pat = vec![0xdb];
        pat.extend_from_slice(&(key.len() as u32).to_be_bytes());
        pat.extend_from_slice(key.as_bytes());
        let at = out.windows(pat.len()).position(|w| w == pat).unwrap();
        &out[at + pat.len()..]
    };
    assert_eq!(&find("trace_id")[..9], &[0xcf, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(&find("error")[..9], &[0xd3, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(&find("metrics")[..5], &[0xdf, 0, 0, 0, 1]);
    assert_eq!(find("m")[0], 0xcb);
    assert_eq!(&find("m")[1..9], &1.5f64.to_bits().to_be_bytes());
    assert_eq!(&find("type")[5..8], b"web");
    let body = super::super::datadog_export::body(&[out.clone(), out]);
    assert_eq!(&body[..5], &[0xdd, 0, 0, 0, 2]);
}

#[test]
fn not_traced_is_a_user_drop_without_decision_maker() {
    let mut t = trace();
    t.trace_tags = vec![("_dd.p.tid".into(), "6b150a7f00000000".into())];
    t.decide(false, 5);
    assert_eq!(t.priority, -1);
    assert_eq!(t.agent_rate, None);
    t.decide(true, 5);
    assert_eq!(t.priority, 1);
    assert_eq!(t.agent_rate, Some(1.0));
    // Before the agent sent rates: the default mechanism, no `_dd.p.ksr`.
    assert_eq!(
        t.trace_tags,
        vec![
            ("_dd.p.tid".to_string(), "6b150a7f00000000".to_string()),
            ("_dd.p.dm".to_string(), "-0".to_string())
        ]
    );
}

#[test]
fn the_agent_rates_as_dd_trace_cpp_takes_them() {
    use super::super::datadog_export::{agent_rate, take_rates};
    // Thread-local: this test's thread starts without rates.
    assert_eq!(agent_rate("svc"), None);
    take_rates(br#"{"rate_by_service":{"service:,env:":0.5,"service:svc,env:":0.25}}"#);
    assert_eq!(agent_rate("svc"), Some(0.25));
    assert_eq!(agent_rate("other"), Some(0.5));
    // Not an object, a bad rate: nothing changes.
    take_rates(b"[]");
    take_rates(br#"{"rate_by_service":{"service:svc,env:":2}}"#);
    take_rates(br#"{"rate_by_service":{"service:svc,env:":"x"}}"#);
    assert_eq!(agent_rate("svc"), Some(0.25));
    // No rates: those by service go, the default stays.
    take_rates(b"{}");
    assert_eq!(agent_rate("svc"), Some(0.5));
}
