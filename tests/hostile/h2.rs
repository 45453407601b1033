//! Hand-made HTTP/2 frames (HPACK literals without indexing or Huffman) and a
//! reader of what came back.

use std::collections::BTreeSet;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const CONTINUATION: u8 = 9;
pub const DATA: u8 = 0;
pub const END_STREAM: u8 = 1;
pub const END_HEADERS: u8 = 4;

/// One frame.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn int(out: &mut Vec<u8>, prefix_bits: u8, first: u8, mut v: usize) {
    let max = (1usize << prefix_bits) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128 + 128) as u8);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of literal fields (no indexing, no Huffman).
pub fn block(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in headers {
        out.push(0);
        int(&mut out, 7, 0, n.len());
        out.extend_from_slice(n.as_bytes());
        int(&mut out, 7, 0, v.len());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

/// The request headers of case `id` plus `extra`.
pub fn request(id: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut h = vec![
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "edge"),
        ("x-case", id),
    ];
    h.extend_from_slice(extra);
    block(&h)
}

/// The start of a connection: preface and empty SETTINGS.
pub fn start() -> Vec<u8> {
    let mut b = PREFACE.to_vec();
    b.extend(frame(SETTINGS, 0, 0, &[]));
    b
}

/// Frames received, as `(type, flags, stream, payload)`.
fn frames(bytes: &[u8]) -> Vec<(u8, u8, u32, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 9 <= bytes.len() {
        let len = (usize::from(bytes[i]) << 16)
            | (usize::from(bytes[i + 1]) << 8)
            | usize::from(bytes[i + 2]);
        if i + 9 + len > bytes.len() {
            break;
        }
        let stream = u32::from_be_bytes([bytes[i + 5], bytes[i + 6], bytes[i + 7], bytes[i + 8]])
            & 0x7fff_ffff;
        out.push((
            bytes[i + 3],
            bytes[i + 4],
            stream,
            &bytes[i + 9..i + 9 + len],
        ));
        i += 9 + len;
    }
    out
}

/// Whether a GOAWAY arrived.
pub fn saw_goaway(bytes: &[u8]) -> bool {
    frames(bytes).iter().any(|f| f.0 == GOAWAY)
}

/// What the server did: response HEADERS, RST_STREAM codes, GOAWAY code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Streams that got response headers.
    pub responses: usize,
    /// RST_STREAM error codes received.
    pub resets: BTreeSet<u32>,
    /// How many RST_STREAM.
    pub reset_count: usize,
    /// GOAWAY error code.
    pub goaway: Option<u32>,
    /// The connection was closed.
    pub closed: bool,
}

/// Summarises the server's frames (the server preface is skipped by framing).
pub fn summary(bytes: &[u8], closed: bool) -> Summary {
    let mut s = Summary {
        responses: 0,
        resets: BTreeSet::new(),
        reset_count: 0,
        goaway: None,
        closed,
    };
    for (kind, _flags, stream, payload) in frames(bytes) {
        match kind {
            HEADERS if stream != 0 => s.responses += 1,
            RST_STREAM if payload.len() >= 4 => {
                s.resets.insert(u32::from_be_bytes([
                    payload[0], payload[1], payload[2], payload[3],
                ]));
                s.reset_count += 1;
            }
            GOAWAY if payload.len() >= 8 => {
                s.goaway = Some(u32::from_be_bytes([
                    payload[4], payload[5], payload[6], payload[7],
                ]));
            }
            _ => {}
        }
    }
    s
}
