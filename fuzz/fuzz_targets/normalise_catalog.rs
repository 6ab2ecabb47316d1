//! The catalog reader must never panic, whatever an upstream publishes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use otc_gateway::catalog::dialect::{normalise_catalog, DialectDefaults};

fuzz_target!(|data: &[u8]| {
    let _ = normalise_catalog(data, DialectDefaults { toolkit: Some("Kit"), version: Some("1.0.0") });
    let _ = otc_gateway::wire::normalise_tool_response(data);
});
