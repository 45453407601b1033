//! The compression libraries behind one body (a response's, or a request's): each chunk is compressed and flushed
//! (so the client can decode what has arrived, as Envoy's `Flush` state), the last one
//! finishes the stream.

use super::CompressorStats;
use crate::chain::{BodyEncoder, EncodeError};
use crate::per_worker::PerWorker;
use bytes::Bytes;
use courier_config::filters::compressor::Library;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A library's streaming encoder writing into a buffer the filter empties per chunk.
enum Engine {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    // Boxed: brotli's writer carries its state inline (a few KiB).
    Brotli(Option<Box<brotli::CompressorWriter<Vec<u8>>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Engine {
    fn new(library: &Library) -> std::io::Result<Self> {
        Ok(match *library {
            Library::Gzip { level, chunk_size } => Engine::Gzip(flate2::write::GzEncoder::new(
                Vec::with_capacity(chunk_size as usize),
                flate2::Compression::new(level),
            )),
            Library::Brotli {
                quality,
                window_bits,
                input_block_bits,
                mode,
                disable_literal_context_modeling,
                chunk_size,
            } => {
                use brotli::enc::backward_references::BrotliEncoderMode;
                let params = brotli::enc::BrotliEncoderParams {
                    quality: quality as i32,
                    lgwin: window_bits as i32,
                    lgblock: input_block_bits as i32,
                    // Envoy's DEFAULT is brotli's default, generic.
                    mode: match mode {
                        2 => BrotliEncoderMode::BROTLI_MODE_TEXT,
                        3 => BrotliEncoderMode::BROTLI_MODE_FONT,
                        _ => BrotliEncoderMode::BROTLI_MODE_GENERIC,
                    },
                    disable_literal_context_modeling: i32::from(disable_literal_context_modeling),
                    ..Default::default()
                };
                Engine::Brotli(Some(Box::new(brotli::CompressorWriter::with_params(
                    Vec::with_capacity(chunk_size as usize),
                    chunk_size as usize,
                    &params,
                ))))
            }
            Library::Zstd {
                level,
                checksum,
                strategy,
                chunk_size,
            } => {
                let mut e = zstd::stream::write::Encoder::new(
                    Vec::with_capacity(chunk_size as usize),
                    level as i32,
                )?;
                e.include_checksum(checksum)?;
                if let Some(s) = zstd_strategy(strategy) {
                    e.set_parameter(zstd::zstd_safe::CParameter::Strategy(s))?;
                }
                Engine::Zstd(e)
            }
        })
    }

    /// Compresses `data`, then flushes (or, with `finish`, ends the stream); returns what
    /// the library wrote.
    fn compress(&mut self, data: &[u8], finish: bool) -> std::io::Result<Bytes> {
        let out = match self {
            Engine::Gzip(e) => {
                e.write_all(data)?;
                if finish {
                    e.try_finish()?;
                } else {
                    e.flush()?;
                }
                std::mem::take(e.get_mut())
            }
            Engine::Brotli(slot) => {
                let Some(e) = slot.as_mut() else {
                    return Ok(Bytes::new());
                };
                e.write_all(data)?;
                if finish {
                    // Finishing consumes the writer; a finished stream takes no more.
                    slot.take().map(|e| e.into_inner()).unwrap_or_default()
                } else {
                    e.flush()?;
                    std::mem::take(e.get_mut())
                }
            }
            Engine::Zstd(e) => {
                e.write_all(data)?;
                if finish {
                    e.do_finish()?;
                } else {
                    e.flush()?;
                }
                std::mem::take(e.get_mut())
            }
        };
        Ok(Bytes::from(out))
    }
}

/// Envoy's zstd `strategy` (0: the library's choice).
fn zstd_strategy(s: i32) -> Option<zstd::zstd_safe::Strategy> {
    use zstd::zstd_safe::Strategy as S;
    Some(match s {
        1 => S::ZSTD_fast,
        2 => S::ZSTD_dfast,
        3 => S::ZSTD_greedy,
        4 => S::ZSTD_lazy,
        5 => S::ZSTD_lazy2,
        6 => S::ZSTD_btlazy2,
        7 => S::ZSTD_btopt,
        8 => S::ZSTD_btultra,
        9 => S::ZSTD_btultra2,
        _ => return None,
    })
}

/// Which body a compression is for: its byte counters differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// The request body, on its way upstream.
    Request,
    /// The response body, on its way downstream.
    Response,
}

/// One body's compression, with the filter's byte counters.
pub(crate) struct Compression {
    engine: Engine,
    stats: Arc<PerWorker<CompressorStats>>,
    worker: usize,
    direction: Direction,
    finished: bool,
}

impl Compression {
    /// A compression with `library`'s options; counts into `stats` of `worker`.
    pub(crate) fn new(
        library: &Library,
        stats: Arc<PerWorker<CompressorStats>>,
        worker: usize,
        direction: Direction,
    ) -> Result<Self, EncodeError> {
        Ok(Self {
            engine: Engine::new(library).map_err(|e| EncodeError(e.to_string()))?,
            stats,
            worker,
            direction,
            finished: false,
        })
    }

    fn run(&mut self, data: &[u8], finish: bool) -> Result<Bytes, EncodeError> {
        if self.finished {
            return Ok(Bytes::new());
        }
        // An empty chunk mid-stream has nothing to flush.
        if data.is_empty() && !finish {
            return Ok(Bytes::new());
        }
        let out = self
            .engine
            .compress(data, finish)
            .map_err(|e| EncodeError(e.to_string()))?;
        self.finished = finish;
        let s = self.stats.get(self.worker);
        let (before, after) = match self.direction {
            Direction::Request => (
                &s.request_total_uncompressed_bytes,
                &s.request_total_compressed_bytes,
            ),
            Direction::Response => (&s.total_uncompressed_bytes, &s.total_compressed_bytes),
        };
        before.fetch_add(data.len() as u64, Ordering::Relaxed);
        after.fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(out)
    }
}

impl BodyEncoder for Compression {
    fn encode_data(&mut self, data: Bytes, end_stream: bool) -> Result<Bytes, EncodeError> {
        self.run(&data, end_stream)
    }

    fn encode_trailers(&mut self, _trailers: &mut http::HeaderMap) -> Result<Bytes, EncodeError> {
        // Trailers end the body without an `end_stream` chunk: finish the stream here.
        self.run(&[], true)
    }
}
