use super::*;

fn headers(h: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in h {
        m.append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    m
}

fn ctx(high: u64, low: u64, span: u64, parent: u64) -> Option<Context> {
    Some(Context {
        trace_high: high,
        trace_low: low,
        span,
        parent,
    })
}

#[test]
fn single_header_forms_as_envoy_reads_them() {
    let cases: &[(&str, Result<Option<Context>, ()>)] = &[
        ("1", Ok(None)),
        ("d", Ok(None)),
        ("x", Err(())),
        (
            "80f198ee56343ba8-e457b5a2e4d86bd1",
            Ok(ctx(0, 0x80f198ee56343ba8, 0xe457b5a2e4d86bd1, 0)),
        ),
        (
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
            Ok(ctx(
                0x80f198ee56343ba8,
                0x64fe8b2a57d3eff7,
                0xe457b5a2e4d86bd1,
                0x05e3ac9a4f6e3b90,
            )),
        ),
        ("80f198ee56343ba8-e457b5a2e4d86bd1-x", Err(())),
        ("80f198ee56343ba8-e457b5a2e4d86bd1-", Err(())),
        ("80f198ee56343ba8-e457b5a2e4d86bd1-1-05e3", Err(())),
        ("80f198ee56343ba8-e457b5a2e4d86bd", Err(())),
        ("zzf198ee56343ba8-e457b5a2e4d86bd1", Err(())),
    ];
    for (b3, want) in cases {
        assert_eq!(single(b3.as_bytes()), *want, "{b3}");
    }
}

#[test]
fn multi_headers_and_the_sampled_flag() {
    let h = headers(&[("x-b3-traceid", "abc"), ("x-b3-spanid", "1")]);
    assert_eq!(extract(&h), Ok(ctx(0, 0xabc, 1, 0)));
    assert_eq!(extract_sampled(&h), None);
    // Only a span id, or only a trace id: no context.
    assert_eq!(extract(&headers(&[("x-b3-spanid", "1")])), Ok(None));
    // A 33-digit trace id is not one number.
    let long = "463ac35c9f6413ad48485a3953bb61240";
    let h = headers(&[("x-b3-traceid", long), ("x-b3-spanid", "1")]);
    assert_eq!(extract(&h), Err(()));
    let h = headers(&[
        ("x-b3-traceid", "1"),
        ("x-b3-spanid", "2"),
        ("x-b3-parentspanid", "q"),
    ]);
    assert_eq!(extract(&h), Err(()));
    for (v, want) in [("1", true), ("true", true), ("0", false), ("yes", false)] {
        assert_eq!(
            extract_sampled(&headers(&[("x-b3-sampled", v)])),
            Some(want)
        );
    }
    // `b3` wins over `x-b3-sampled`; its flag sits where its length says.
    let h = headers(&[("b3", "0"), ("x-b3-sampled", "1")]);
    assert_eq!(extract_sampled(&h), Some(false));
    let h = headers(&[("b3", "80f198ee56343ba8-e457b5a2e4d86bd1-d")]);
    assert_eq!(extract_sampled(&h), Some(true));
    let h = headers(&[("b3", "80f198ee56343ba8-e457b5a2e4d86bd1")]);
    assert_eq!(extract_sampled(&h), None);
}
