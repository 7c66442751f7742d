#![no_main]
// The logic lives in p2pmp_core::fuzzing so the normal test suite builds and replays it.
libfuzzer_sys::fuzz_target!(|data: &[u8]| p2pmp_core::fuzzing::saved_engine(data));
