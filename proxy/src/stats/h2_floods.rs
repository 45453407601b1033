//! The process's HTTP/2 flood counters (`http2.*`), counted by the codec stage's
//! flood checks on every worker.

use std::sync::atomic::{AtomicU64, Ordering};

/// `http2.outbound_control_flood`.
pub static CONTROL_FLOODS: AtomicU64 = AtomicU64::new(0);
/// `http2.outbound_flood`.
pub static FLOODS: AtomicU64 = AtomicU64::new(0);
/// `http2.inbound_empty_frames_flood`.
pub static EMPTY_FLOODS: AtomicU64 = AtomicU64::new(0);
/// `http2.inbound_priority_frames_flood`.
pub static PRIORITY_FLOODS: AtomicU64 = AtomicU64::new(0);
/// `http2.inbound_window_update_frames_flood`.
pub static WINDOW_UPDATE_FLOODS: AtomicU64 = AtomicU64::new(0);

/// The process's flood counters by Envoy's names.
pub fn samples() -> [(String, u64); 5] {
    [
        (
            "http2.inbound_empty_frames_flood".to_string(),
            EMPTY_FLOODS.load(Ordering::Relaxed),
        ),
        (
            "http2.inbound_priority_frames_flood".to_string(),
            PRIORITY_FLOODS.load(Ordering::Relaxed),
        ),
        (
            "http2.inbound_window_update_frames_flood".to_string(),
            WINDOW_UPDATE_FLOODS.load(Ordering::Relaxed),
        ),
        (
            "http2.outbound_control_flood".to_string(),
            CONTROL_FLOODS.load(Ordering::Relaxed),
        ),
        (
            "http2.outbound_flood".to_string(),
            FLOODS.load(Ordering::Relaxed),
        ),
    ]
}
