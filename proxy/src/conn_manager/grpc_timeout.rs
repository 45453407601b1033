//! The `grpc-timeout` request header (gRPC over HTTP/2: 1 to 8 digits and a
//! unit, `H` `M` `S` `m` `u` `n`), which a route's
//! `max_stream_duration.grpc_timeout_header_max` turns into the stream's limit.

use http::HeaderMap;
use std::time::Duration;

/// The request's `grpc-timeout`, if present and well-formed (Envoy ignores a
/// malformed one).
pub fn of(headers: &HeaderMap) -> Option<Duration> {
    parse(headers.get("grpc-timeout")?.as_bytes())
}

fn parse(v: &[u8]) -> Option<Duration> {
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_malformed_values() {
        assert_eq!(parse(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse(b"10S"), Some(Duration::from_secs(10)));
        assert_eq!(parse(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse(b"7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse(b"99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in [
            &b""[..],
            b"S",
            b"123456789S",
            b"1x",
            b"-1S",
            b"1.5S",
            b"1 S",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
