#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| urmove::protocol::fuzz::conversation(data));
