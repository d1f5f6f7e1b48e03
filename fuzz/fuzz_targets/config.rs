//! Fuzz target: the config parser on arbitrary UTF-8 text. Never panics; a rejected text comes with
//! at least one error that says something.

#![no_main]

use bloomgate::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(errors) = Config::from_toml_str(text) {
        assert!(!errors.is_empty(), "a rejected config came with no errors");
        assert!(!errors.to_string().is_empty());
    }
});
