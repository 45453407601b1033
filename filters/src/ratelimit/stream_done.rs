//! `hits_addend` and `apply_on_stream_done` of the global filter's `rate_limits`.
//!
//! A descriptor's `hits_addend` is its `number`, or its format's value (a number, or a
//! string of one, in `[0, 1e9]`; anything else drops the descriptor, as Envoy's
//! `RateLimitPolicy::populateDescriptors`).
//!
//! `apply_on_stream_done` descriptors are left out of the request's call. Their entries
//! are taken when the filter sees the request (courier's response path no longer holds the
//! request headers, so a later filter's change to them is not seen), their `hits_addend`
//! when the response passes the filter (so dynamic metadata set until then counts), and
//! they go to the service when the response body is done with (sent, or the stream
//! reset), the answer ignored, as Envoy's `onDestroy` does.

use super::RateLimitTransport;
use crate::chain::{BodyEncoder, EncodeError};
use crate::local_ratelimit::limiter::Entries;
use bytes::Bytes;
use courier_config::core::MetadataMap;
use courier_config::filters::RateLimitFilter;
use courier_config::filters::rate_limit_actions::{HitsAddend, HitsAddendFormat, MAX_HITS_ADDEND};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use http::HeaderMap;
use std::sync::Arc;

/// The value of `h` for a request with dynamic metadata `metadata`; `None` drops the
/// descriptor.
pub fn hits(h: &HitsAddend, metadata: &MetadataMap) -> Option<u64> {
    let value = match h {
        HitsAddend::Number(n) => return Some(*n),
        HitsAddend::Format(HitsAddendFormat::Literal(text)) => parse(text)?,
        HitsAddend::Format(HitsAddendFormat::DynamicMetadata { namespace, path }) => {
            let object = metadata.get(namespace)?;
            let (first, rest) = path.split_first()?;
            let v = rest
                .iter()
                .try_fold(object.get(first)?, |v, k| v.as_object()?.get(k))?;
            match v {
                serde_json::Value::Number(n) => n.as_f64()?,
                serde_json::Value::String(s) => parse(s)?,
                _ => return None,
            }
        }
    };
    // NaN fails the range check too.
    if !(0.0..=MAX_HITS_ADDEND as f64).contains(&value) {
        return None;
    }
    // Envoy truncates a fractional addend.
    Some(value as u64)
}

/// A string as Envoy's `absl::SimpleAtod` reads it (surrounding blanks allowed).
fn parse(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok()
}

/// A descriptor for the service.
pub fn descriptor(entries: Entries, hits_addend: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .into_iter()
            .map(|(key, value)| Entry { key, value })
            .collect(),
        hits_addend: hits_addend.map(|value| UInt64Value { value }),
        ..Default::default()
    }
}

/// The stream-done descriptors a filter took at the request, in the request's filter
/// state until the response passes that filter.
#[derive(Debug, Default, Clone)]
pub struct Armed(pub Vec<ArmedCall>);

/// One filter's stream-done call.
#[derive(Debug, Clone)]
pub struct ArmedCall {
    /// The filter instance's id (a chain may hold several rate limit filters).
    pub filter: u64,
    /// The call's domain.
    pub domain: String,
    /// Each descriptor's entries and `hits_addend`.
    pub descriptors: Vec<(Entries, Option<HitsAddend>)>,
}

/// Passes the response body through unchanged; the call goes out when it is dropped.
pub struct OnStreamDone {
    /// What the call needs; taken when sent.
    pub call: Option<(
        Arc<dyn RateLimitTransport>,
        Arc<RateLimitFilter>,
        RateLimitRequest,
    )>,
}

impl BodyEncoder for OnStreamDone {
    fn encode_data(&mut self, data: Bytes, _end_stream: bool) -> Result<Bytes, EncodeError> {
        Ok(data)
    }

    fn encode_trailers(&mut self, _trailers: &mut HeaderMap) -> Result<Bytes, EncodeError> {
        Ok(Bytes::new())
    }
}

impl Drop for OnStreamDone {
    fn drop(&mut self) {
        let Some((transport, config, request)) = self.call.take() else {
            return;
        };
        // Bodies are dropped on the worker's runtime; without one there is nowhere to send.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            let call = transport.should_rate_limit(&config.service, config.timeout, request);
            // The answer is ignored, as Envoy's `OnStreamDoneCallBack`.
            match config.timeout {
                Some(t) => {
                    let _ = tokio::time::timeout(t, call).await;
                }
                None => {
                    let _ = call.await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_read_numbers_and_numeric_strings_in_range() {
        let mut md = MetadataMap::new();
        md.insert(
            "ns".into(),
            serde_json::json!({"n": 4, "s": " 6 ", "f": 2.7, "neg": -1, "big": 2e9, "w": "x", "o": {"k": 5}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let dm = |path: &[&str]| {
            HitsAddend::Format(HitsAddendFormat::DynamicMetadata {
                namespace: "ns".into(),
                path: path.iter().map(|p| p.to_string()).collect(),
            })
        };
        assert_eq!(hits(&HitsAddend::Number(0), &md), Some(0));
        assert_eq!(hits(&dm(&["n"]), &md), Some(4));
        assert_eq!(hits(&dm(&["s"]), &md), Some(6));
        assert_eq!(hits(&dm(&["f"]), &md), Some(2));
        assert_eq!(hits(&dm(&["o", "k"]), &md), Some(5));
        for bad in [&["neg"][..], &["big"], &["w"], &["o"], &["missing"], &[]] {
            assert_eq!(hits(&dm(bad), &md), None, "{bad:?}");
        }
        let lit = |t: &str| HitsAddend::Format(HitsAddendFormat::Literal(t.into()));
        assert_eq!(hits(&lit("9"), &md), Some(9));
        assert_eq!(hits(&lit("nan"), &md), None);
    }
}
