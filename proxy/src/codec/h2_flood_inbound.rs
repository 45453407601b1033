//! HTTP/2 inbound flood limits (see the parent module): the frame headers of
//! what the client sends, walked once its preface is seen.

use super::{
    CONTINUATION, DATA, EMPTY_FLOODS, END_STREAM, FRAME_HEADER, HEADERS, PRIORITY, PRIORITY_FLOODS,
    WINDOW_UPDATE, WINDOW_UPDATE_FLOODS,
};
use courier_config::listener::http_options::H2FloodLimits;
use std::sync::atomic::AtomicU64;

/// Envoy's inbound frame limits: consecutive empty HEADERS/CONTINUATION/DATA
/// frames without END_STREAM, PRIORITY frames per stream opened, and
/// WINDOW_UPDATE frames per stream opened and DATA frame sent.
pub(super) struct Inbound {
    header: [u8; FRAME_HEADER],
    header_len: usize,
    /// Payload bytes of the current frame still to skip.
    skip: u64,
    empty_run: u32,
    streams: u64,
    last_stream: u32,
    priority: u64,
    window_updates: u64,
    /// The limits (Envoy's defaults unless configured).
    max_empty_run: u32,
    max_priority_per_stream: u64,
    max_window_updates_per_data_frame: u64,
}

impl Inbound {
    pub(super) fn new(limits: &H2FloodLimits) -> Self {
        Inbound {
            header: [0; FRAME_HEADER],
            header_len: 0,
            skip: 0,
            empty_run: 0,
            streams: 0,
            last_stream: 0,
            priority: 0,
            window_updates: 0,
            max_empty_run: limits.consecutive_empty_frames,
            max_priority_per_stream: u64::from(limits.priority_frames_per_stream),
            max_window_updates_per_data_frame: u64::from(limits.window_updates_per_data_frame),
        }
    }

    /// Walks `bytes` (the next bytes read, after the preface); the flood
    /// counter of the first limit crossed, if any.
    pub(super) fn walk(
        &mut self,
        mut bytes: &[u8],
        data_frames: u64,
    ) -> Option<&'static AtomicU64> {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = usize::try_from(self.skip)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.skip -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let take = (FRAME_HEADER - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
            self.header_len += take;
            bytes = &bytes[take..];
            if self.header_len < FRAME_HEADER {
                return None;
            }
            self.header_len = 0;
            let h = self.header;
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            self.skip = u64::from(len);
            if let Some(flood) = self.frame(kind, flags, stream, len == 0, data_frames) {
                return Some(flood);
            }
        }
        None
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        empty: bool,
        data_frames: u64,
    ) -> Option<&'static AtomicU64> {
        match kind {
            DATA | HEADERS | CONTINUATION => {
                if kind == HEADERS && stream > self.last_stream {
                    self.last_stream = stream;
                    self.streams += 1;
                }
                let end_stream = kind != CONTINUATION && flags & END_STREAM != 0;
                if empty && !end_stream {
                    self.empty_run += 1;
                    if self.empty_run > self.max_empty_run {
                        return Some(&EMPTY_FLOODS);
                    }
                } else {
                    self.empty_run = 0;
                }
            }
            PRIORITY => {
                self.priority += 1;
                if self.priority > self.max_priority_per_stream * (1 + self.streams) {
                    return Some(&PRIORITY_FLOODS);
                }
            }
            WINDOW_UPDATE => {
                self.window_updates += 1;
                let allowed =
                    1 + 2 * (self.streams + self.max_window_updates_per_data_frame * data_frames);
                if self.window_updates > allowed {
                    return Some(&WINDOW_UPDATE_FLOODS);
                }
            }
            _ => {}
        }
        None
    }
}
