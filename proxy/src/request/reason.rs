//! HTTP/1.1 reason phrases as Envoy's codec writes them: the phrase of its own
//! status table, `Unknown` for a code the table lacks (418, 425, 451, any
//! unregistered code), where hyper would write the IANA phrase or none.

use http::StatusCode;

/// Whether Envoy's status table (`Http::Code`) has `code`.
fn envoy_knows(code: u16) -> bool {
    matches!(
        code,
        100 | 101
            | 200..=208
            | 226
            | 300..=305
            | 307
            | 308
            | 400..=417
            | 421..=424
            | 426
            | 428
            | 429
            | 431
            | 500..=508
            | 510
            | 511
    )
}

/// Gives a response whose status Envoy's table lacks Envoy's `Unknown`
/// phrase, unless it carries a phrase of its own (a forwarded one).
pub fn envoy_phrase<B>(resp: &mut http::Response<B>) {
    let code: StatusCode = resp.status();
    if !envoy_knows(code.as_u16())
        && resp
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .is_none()
    {
        resp.extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(b"Unknown"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_envoy_lacks_say_unknown() {
        for (code, unknown) in [
            (200, false),
            (418, true),
            (425, true),
            (451, true),
            (599, true),
            (511, false),
        ] {
            let mut r = http::Response::new(());
            *r.status_mut() = StatusCode::from_u16(code).expect("code");
            envoy_phrase(&mut r);
            assert_eq!(
                r.extensions().get::<hyper::ext::ReasonPhrase>().is_some(),
                unknown,
                "{code}"
            );
        }
    }
}
