//! The request parser must never panic, whatever a client sends.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if otc_gateway::wire::nesting_within(data, 64) {
        let _ = otc_gateway::call::parse_call(data);
    }
});
