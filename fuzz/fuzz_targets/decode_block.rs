#![no_main]
//! `Block::decode`: never panics; a decoded block re-encodes to the same bytes.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flushpoint_fuzz::run_target("decode_block", data));
