#![no_main]
//! `HoldingDb` op sequences against a `BTreeMap` model. See `flushpoint_fuzz::holding`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| flushpoint_fuzz::run_target("holding_ops", data));
