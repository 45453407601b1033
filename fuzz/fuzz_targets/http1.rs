//! The HTTP/1 request path end to end: bytes from a client, through hyper's
//! codec, courier's codec-error replies, the connection manager (limits,
//! sanitising, path normalisation, routing, local replies) and the router, over
//! an in-memory connection (`fuzz/http1.yaml`; its cluster has no endpoints).
//! Every connection must end once the client has sent everything, and what
//! courier writes must be HTTP/1 responses.
#![no_main]

use courier::fuzzing::Http1Harness;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn harness() -> &'static Http1Harness {
    static HARNESS: OnceLock<Http1Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        Http1Harness::new(include_str!("../http1.yaml")).expect("the fuzz bootstrap serves")
    })
}

fuzz_target!(|data: &[u8]| {
    match harness().serve(data) {
        Ok(out) => assert!(
            out.is_empty() || out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "),
            "not an HTTP/1 response: {:?}",
            String::from_utf8_lossy(&out[..out.len().min(200)])
        ),
        Err(stalled) => panic!(
            "the connection did not end after its input: {:?}",
            String::from_utf8_lossy(&stalled.output[..stalled.output.len().min(200)])
        ),
    }
});
