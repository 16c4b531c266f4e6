#![no_main]
//! `flushpoint::records::decode::<HistoryEntry<ValidatorSet>>` and its payload codec: never panics; encode∘decode
//! round-trips byte for byte. See `flushpoint_fuzz::check_record`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flushpoint_fuzz::run_target("decode_validators_info", data));
