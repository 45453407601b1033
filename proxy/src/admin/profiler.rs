//! `/cpuprofiler` and `/heapprofiler`, answered as Envoy 1.40's release build
//! answers them: it is built without gperftools, so starting the CPU profiler
//! fails (500) and the heap profiler is not there (501). courier has neither
//! profiler; `admin.profile_path`, where a profile would go, is kept for
//! `/config_dump` and written by nothing, as in that build.

use crate::request::local_reply::{Body, reply};
use http::{Response, StatusCode};

/// `POST /cpuprofiler?enable=<y|n>`.
pub fn cpu(query: &str) -> Response<Body> {
    match query.split('&').find_map(|p| p.strip_prefix("enable=")) {
        Some("y") => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            "failure to start the profiler",
        ),
        // Stopping a profiler that never ran is a success in Envoy too.
        Some("n") => reply(StatusCode::OK, "OK\n"),
        _ => reply(StatusCode::BAD_REQUEST, "?enable=<y|n>\n"),
    }
}

/// `POST /heapprofiler`, whatever its parameters.
pub fn heap() -> Response<Body> {
    reply(
        StatusCode::NOT_IMPLEMENTED,
        "The current build does not support heap profiler",
    )
}
