use super::*;

#[test]
fn service_and_method_as_envoy_resolves_them() {
    assert_eq!(
        service_and_method("/foo.bar.Zoo/method.name?a=b"),
        Some(("foo.bar.Zoo", "method.name"))
    );
    assert_eq!(service_and_method("//svc//m"), Some(("svc", "m")));
    for p in ["", "/", "//", "/service_name", "/service_name/", "/a/b/c"] {
        assert_eq!(service_and_method(p), None, "{p}");
    }
}

#[test]
fn grpc_content_types_and_responses() {
    assert!(is_grpc_content_type(b"application/grpc"));
    assert!(is_grpc_content_type(b"Application/GRPC+proto"));
    assert!(is_grpc_content_type(b"application/grpc;x=y"));
    assert!(!is_grpc_content_type(b"application/grpc-web"));
    let mut h = HeaderMap::new();
    assert!(!is_grpc_response(StatusCode::OK, &h, true));
    h.insert("grpc-status", "0".parse().unwrap());
    assert!(is_grpc_response(StatusCode::NOT_FOUND, &h, true));
    assert!(!is_grpc_response(StatusCode::OK, &h, false));
    h.insert("content-type", "application/grpc".parse().unwrap());
    assert!(is_grpc_response(StatusCode::OK, &h, false));
    assert!(!is_grpc_response(StatusCode::BAD_GATEWAY, &h, false));
}

#[test]
fn percent_encoding_and_status_mapping() {
    assert_eq!(
        percent_encode(b"no healthy upstream"),
        "no healthy upstream"
    );
    assert_eq!(percent_encode(b"a%b\n\xff~"), "a%25b%0A%FF%7E");
    assert_eq!(http_to_grpc_status(StatusCode::SERVICE_UNAVAILABLE), 14);
    assert_eq!(http_to_grpc_status(StatusCode::BAD_REQUEST), 13);
    assert_eq!(http_to_grpc_status(StatusCode::IM_A_TEAPOT), 2);
}

#[test]
fn frames_counted_across_chunks() {
    let mut c = FrameCounter::default();
    // Two frames (3 and 0 bytes) then the start of a third, split anywhere.
    let bytes = [0, 0, 0, 0, 3, 1, 2, 3, 1, 0, 0, 0, 0, 0, 0];
    let mut total = 0;
    for chunk in bytes.chunks(2) {
        total += c.inspect(chunk);
    }
    assert_eq!(total, 3);
    assert_eq!(c.count(), 3);
    // Any flags count, but a response's Connect end of stream (0x02) ends counting.
    let mut any = FrameCounter::default();
    assert_eq!(any.inspect(&[0x80, 0, 0, 0, 0, 0x02, 0, 0, 0, 0]), 2);
    let mut resp = FrameCounter::response();
    assert_eq!(resp.inspect(&[0x80, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0]), 1);
}

mod filters {
    use crate::build_chain;
    use crate::chain::{FilterChain, ResponseHead, Verdict};
    use crate::grpc::stats::GrpcStatsObject;
    use crate::request::SelectedRoute;
    use crate::test_support::{filter_config, head, plain_conn, state};
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    /// Envoy Gateway's pair, as on a GRPCRoute listener.
    fn chain() -> (FilterChain, Vec<crate::build::FilterStats>) {
        let web = filter_config(
            "name: envoy.filters.http.grpc_web\ntyped_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.grpc_web.v3.GrpcWeb}\n",
        );
        let stats = filter_config(
            "name: envoy.filters.http.grpc_stats\ntyped_config: {\"@type\": type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig, emitFilterState: true, statsForAllMethods: true}\n",
        );
        build_chain(&[web, stats], None).unwrap()
    }

    fn counters(stats: &[crate::build::FilterStats]) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for s in stats {
            if let crate::build::FilterStats::Grpc { counters } = s {
                counters.each(|n, c| {
                    let v = c.load(Ordering::Relaxed);
                    if v != 0 {
                        out.push((n, v));
                    }
                });
            }
        }
        out.sort();
        out
    }

    fn frame(flag: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![flag];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[tokio::test]
    async fn text_request_through_both_filters() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let (chain, stats) = chain();
        let conn = plain_conn();
        let mut req = state(
            &conn,
            head(
                "POST",
                "/pkg.Echo/Say",
                &[
                    ("content-type", "application/grpc-web-text"),
                    ("accept", "application/grpc-web-text"),
                    ("content-length", "12"),
                ],
            ),
        );
        req.route = Some(SelectedRoute {
            cluster: Some("c"),
            ..Default::default()
        });
        assert!(matches!(
            chain.decode_headers(&mut req, |_| None).await,
            Verdict::Continue
        ));
        let h = &req.head.headers;
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["grpc-accept-encoding"], "identity");
        assert!(!h.contains_key("content-length"));
        // The request body: decoded by grpc_web, then counted by grpc_stats.
        let mut encoders = std::mem::take(&mut req.request_encoders);
        let body = b64.encode(frame(0, b"hi"));
        let up = encoders.data(Bytes::from(body), true).unwrap();
        assert_eq!(up.as_ref(), frame(0, b"hi"));
        // A gRPC response: grpc_stats counts it, grpc_web frames its trailers in base64.
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/grpc".parse().unwrap());
        headers.insert("content-length", "7".parse().unwrap());
        let mut head = ResponseHead {
            status: StatusCode::OK,
            headers: &mut headers,
            end_stream: false,
            local_body: None,
            local: false,
            replacement: None,
        };
        let mut resp = chain.encode_response(&mut req, &mut head);
        assert_eq!(headers["content-type"], "application/grpc-web-text+proto");
        assert!(!headers.contains_key("content-length"));
        let out = resp.data(Bytes::from(frame(0, b"yo")), false).unwrap();
        assert_eq!(out, b64.encode(frame(0, b"yo")));
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let last = resp.trailers(&mut trailers).unwrap();
        assert!(trailers.is_empty());
        assert_eq!(last, b64.encode(frame(0x80, b"grpc-status:0\r\n")));
        let object = req.filter_state.get::<Arc<GrpcStatsObject>>().unwrap();
        assert_eq!(object.request_message_count.load(Ordering::Relaxed), 1);
        assert_eq!(object.response_message_count.load(Ordering::Relaxed), 1);
        let n = |s: &str| (s.to_string(), 1);
        assert_eq!(
            counters(&stats),
            [
                n("cluster.c.grpc-web.pkg.Echo.Say.0"),
                n("cluster.c.grpc-web.pkg.Echo.Say.success"),
                n("cluster.c.grpc-web.pkg.Echo.Say.total"),
                n("cluster.c.grpc.pkg.Echo.Say.0"),
                n("cluster.c.grpc.pkg.Echo.Say.request_message_count"),
                n("cluster.c.grpc.pkg.Echo.Say.response_message_count"),
                n("cluster.c.grpc.pkg.Echo.Say.success"),
                n("cluster.c.grpc.pkg.Echo.Say.total"),
            ]
        );
    }

    #[tokio::test]
    async fn non_grpc_replies_become_grpc_status() {
        let (chain, _) = chain();
        let conn = plain_conn();
        let mut req = state(
            &conn,
            head(
                "POST",
                "/pkg.Echo/Say",
                &[("content-type", "application/grpc-web+proto")],
            ),
        );
        chain.decode_headers(&mut req, |_| None).await;
        // A local reply: its body is the message at once.
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "text/plain".parse().unwrap());
        let mut head = ResponseHead {
            status: StatusCode::SERVICE_UNAVAILABLE,
            headers: &mut headers,
            end_stream: false,
            local_body: Some(Bytes::from_static(b"no healthy upstream")),
            local: true,
            replacement: None,
        };
        let mut body = chain.encode_response(&mut req, &mut head);
        assert!(!body.holds_headers());
        assert_eq!(headers["grpc-status"], "14");
        assert_eq!(headers["grpc-message"], "no healthy upstream");
        assert_eq!(headers["content-length"], "0");
        assert_eq!(headers["content-type"], "application/grpc-web+proto");
        assert!(
            body.data(Bytes::from_static(b"gone"), true)
                .unwrap()
                .is_empty()
        );
        // An upstream's: the headers wait for the body.
        let mut headers = HeaderMap::new();
        let mut head = ResponseHead {
            status: StatusCode::NOT_FOUND,
            headers: &mut headers,
            end_stream: false,
            local_body: None,
            local: false,
            replacement: None,
        };
        let mut body = chain.encode_response(&mut req, &mut head);
        assert!(body.holds_headers());
        assert!(
            body.data(Bytes::from_static(b"not\nhere"), false)
                .unwrap()
                .is_empty()
        );
        body.data(Bytes::new(), true).unwrap();
        body.release_headers(&mut headers);
        assert_eq!(headers["grpc-status"], "12");
        assert_eq!(headers["grpc-message"], "not%0Ahere");
        // Trailers-only: untouched but for the type.
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", "7".parse().unwrap());
        let mut head = ResponseHead {
            status: StatusCode::OK,
            headers: &mut headers,
            end_stream: true,
            local_body: None,
            local: false,
            replacement: None,
        };
        assert!(chain.encode_response(&mut req, &mut head).is_empty());
        assert_eq!(headers["grpc-status"], "7");
        assert_eq!(headers["content-type"], "application/grpc-web+proto");
    }

    #[tokio::test]
    async fn bad_base64_answers_envoys_400() {
        let (chain, _) = chain();
        let conn = plain_conn();
        let mut req = state(
            &conn,
            head(
                "POST",
                "/pkg.Echo/Say",
                &[("content-type", "application/grpc-web-text")],
            ),
        );
        chain.decode_headers(&mut req, |_| None).await;
        let mut encoders = std::mem::take(&mut req.request_encoders);
        assert!(encoders.data(Bytes::from_static(b"AA*A"), false).is_err());
        let reply = encoders.failure_reply().unwrap();
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.body, "Bad gRPC-web request, invalid base64 data.");
        assert_eq!(reply.details, "grpc_base_64_decode_failed");
    }

    #[tokio::test]
    async fn other_requests_are_left_alone() {
        let (chain, stats) = chain();
        let conn = plain_conn();
        for ct in [
            "application/json",
            "application/grpc-web+json",
            "Application/grpc-web",
        ] {
            let mut req = state(
                &conn,
                head("POST", "/pkg.Echo/Say", &[("content-type", ct)]),
            );
            req.route = Some(SelectedRoute {
                cluster: Some("c"),
                ..Default::default()
            });
            chain.decode_headers(&mut req, |_| None).await;
            assert_eq!(req.head.headers["content-type"], ct);
            assert!(req.request_encoders.is_empty());
            let mut headers = HeaderMap::new();
            let mut head = ResponseHead {
                status: StatusCode::OK,
                headers: &mut headers,
                end_stream: false,
                local_body: None,
                local: false,
                replacement: None,
            };
            assert!(chain.encode_response(&mut req, &mut head).is_empty());
            assert!(headers.is_empty());
        }
        assert!(counters(&stats).is_empty());
    }
}

#[test]
fn connect_end_of_stream_frames() {
    let eos = |json: &[u8]| {
        let mut f = vec![0x02];
        f.extend_from_slice(&(json.len() as u32).to_be_bytes());
        f.extend_from_slice(json);
        f
    };
    let mut ok = FrameCounter::response();
    let mut body = vec![0, 0, 0, 0, 1, 9];
    body.extend(eos(b"{}"));
    body.extend([0, 0, 0, 0, 0]);
    assert_eq!(ok.inspect(&body), 1);
    assert!(ok.connect_success());
    let mut failed = FrameCounter::response();
    failed.inspect(&eos(br#"{"error":{"code":"not_found"}}"#));
    assert!(!failed.connect_success());
    let mut bad = FrameCounter::response();
    bad.inspect(&eos(b""));
    assert!(!bad.connect_success());
    assert!(!FrameCounter::response().connect_success());
}
