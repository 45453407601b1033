//! Bootstrap loading: any text, as YAML and as JSON, must give a bootstrap or
//! errors with paths, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = courier_config::bootstrap_from_str(text, courier_config::load::Format::Yaml);
        let _ = courier_config::bootstrap_from_str(text, courier_config::load::Format::Json);
    }
});
