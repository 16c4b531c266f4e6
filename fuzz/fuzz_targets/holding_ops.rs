#![no_main]
//! `HoldingDb` op sequences against a `BTreeMap` model. See `flushpoint_fuzz::holding`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: flushpoint_fuzz::holding::Input| flushpoint_fuzz::holding::run(&input));
