//! Fuzz target: the RUNPATH planner and writer round trip (see
//! `fuzz/common/roundtrip.rs`). The first byte picks the planner options;
//! the rest is the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../common/roundtrip.rs"]
mod roundtrip;

fuzz_target!(|data: &[u8]| {
    let Some((&variant, file)) = data.split_first() else { return };
    let _ = roundtrip::round_trip(file, &roundtrip::options(variant));
});
