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
    let mut bad = FrameCounter::default();
    assert_eq!(bad.inspect(&[0x80, 0, 0, 0, 0]), 0);
}
