//! The JWT and JWKS parsers: arbitrary tokens and key sets.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = courier_config::filters::jwt_authn::parse_jwks(data);
    if let Ok(token) = std::str::from_utf8(data) {
        let _ = courier_filters::jwt_authn::token::parse(token);
    }
});
