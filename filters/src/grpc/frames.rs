//! Counting the messages of a gRPC (or Connect) stream as its bytes pass.

/// The most of a Connect end-of-stream frame's JSON kept to read its error: Envoy keeps
/// it all; a longer one is taken as unreadable rather than held without bound.
const MAX_EOS_JSON: usize = 64 * 1024;

/// A Connect end-of-stream frame (flag `0x02`) in a response.
#[derive(Debug, Default)]
enum EndOfStream {
    /// None seen.
    #[default]
    None,
    /// Its JSON, as it arrives.
    Reading(Vec<u8>),
    /// Read: whether it names an error code.
    Parsed { error: bool },
    /// Not a JSON object (or too long).
    Invalid,
}

/// Envoy's `Grpc::FrameInspector`: counts the length-prefixed messages of a gRPC stream
/// as its bytes pass, a message when its first byte is seen, whatever its flags, without
/// holding any of it. A response's counter (Envoy's `ResponseFrameCounter`) does not
/// count a Connect end-of-stream frame (flag `0x02`) nor anything after it, and reads
/// its JSON for [`FrameCounter::connect_success`].
#[derive(Debug, Default)]
pub struct FrameCounter {
    /// Bytes of the current frame's 5-byte prefix seen (0: the next byte starts a frame).
    prefix_seen: u8,
    /// The current frame's length, as its prefix is read.
    length: u32,
    /// Payload bytes still to pass.
    remaining: u64,
    /// Nothing is counted (not gRPC).
    off: bool,
    /// A response's counter.
    response: bool,
    eos: EndOfStream,
    /// Frames seen.
    count: u64,
}

impl FrameCounter {
    /// A response's counter.
    pub fn response() -> Self {
        Self {
            response: true,
            ..Self::default()
        }
    }

    /// A counter that counts nothing (the body is not gRPC).
    pub fn off() -> Self {
        Self {
            off: true,
            ..Self::default()
        }
    }

    /// Reads `data`; returns how many frames started in it.
    pub fn inspect(&mut self, mut data: &[u8]) -> u64 {
        let mut delta = 0;
        while !data.is_empty() && !self.off {
            if self.remaining > 0 {
                let n = usize::try_from(self.remaining)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                self.eos_data(&data[..n]);
                self.remaining -= n as u64;
                data = &data[n..];
                if self.remaining == 0 {
                    self.eos_end();
                }
                continue;
            }
            let b = data[0];
            data = &data[1..];
            match self.prefix_seen {
                0 => {
                    // No frame after a Connect end of stream.
                    if !matches!(self.eos, EndOfStream::None) {
                        break;
                    }
                    if self.response && b & 0x02 != 0 {
                        self.eos = EndOfStream::Reading(Vec::new());
                    } else {
                        self.count += 1;
                        delta += 1;
                    }
                    self.prefix_seen = 1;
                    self.length = 0;
                }
                1..=3 => {
                    self.length = (self.length << 8) | u32::from(b);
                    self.prefix_seen += 1;
                }
                _ => {
                    self.length = (self.length << 8) | u32::from(b);
                    self.remaining = u64::from(self.length);
                    self.prefix_seen = 0;
                    if self.remaining == 0 {
                        self.eos_end();
                    }
                }
            }
        }
        delta
    }

    fn eos_data(&mut self, data: &[u8]) {
        if let EndOfStream::Reading(json) = &mut self.eos {
            if json.len() + data.len() > MAX_EOS_JSON {
                self.eos = EndOfStream::Invalid;
            } else {
                json.extend_from_slice(data);
            }
        }
    }

    /// A frame's payload ended: an end-of-stream frame's JSON is read (Envoy's
    /// `frameDataEnd`): an object, with `error.code` naming a failure.
    fn eos_end(&mut self) {
        if let EndOfStream::Reading(json) = &self.eos {
            self.eos = match serde_json::from_slice::<serde_json::Value>(json) {
                Ok(serde_json::Value::Object(m)) => EndOfStream::Parsed {
                    error: m
                        .get("error")
                        .and_then(|e| e.as_object())
                        .is_some_and(|e| e.contains_key("code")),
                },
                _ => EndOfStream::Invalid,
            };
        }
    }

    /// Frames seen so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Envoy's `connectSuccess`: the response's Connect end-of-stream frame was read and
    /// names no error code.
    pub fn connect_success(&self) -> bool {
        matches!(self.eos, EndOfStream::Parsed { error: false })
    }
}
