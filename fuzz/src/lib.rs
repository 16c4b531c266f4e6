//! Shared checks for the flushpoint fuzz targets. Each target in `fuzz_targets/` is a
//! one-line call into this file, so every record decoder gets the same oracle:
//!
//! * decoding arbitrary bytes never panics (neither as a stored, framed value nor as a
//!   bare payload behind a valid frame);
//! * when decoding succeeds, encoding the value gives back exactly the input bytes
//!   (the codec is canonical), and the framed and bare paths agree;
//! * a framed value read under another key of the same length is rejected.
//!
//! `TARGETS` names every target and the one function it calls; `run_target` is what each
//! `fuzz_targets/<name>.rs` calls. The root package's `tests/regressions/fuzz_corpus.rs` includes
//! this file (`#[path]`) and replays the stored corpus `tests/fuzz_corpus/<name>/` through the
//! same `run_target`, so CI checks every stored input without cargo-fuzz or libFuzzer.
//!
//! Invariant: nothing here depends on `libfuzzer-sys`; only the targets do.

use std::fmt::Debug;

use flushpoint::codec::encode_record;
use flushpoint::demo::{
    Block, BlockResults, Commit, ConsensusParams, State, TypedHistoryEntry, ValidatorSet,
};
use flushpoint::records::{
    BlockMeta, BlockStoreState, FlushRecord, HeightValue, Record, decode, encode,
};

/// The key every record is "stored" under.
pub const KEY: &[u8] = b"fuzz/key";
/// Another key of the same length (a crc32 difference of equal-length keys never vanishes).
pub const OTHER_KEY: &[u8] = b"fuzz/kez";

/// The oracle for one record type `T`.
pub fn check_record<T: Record + PartialEq + Debug>(data: &[u8]) {
    // 1. The bytes as a stored value (frame, crc and all). Almost always a checksum error,
    //    but it must be an error, never a panic; a value that decodes is canonical.
    if let Ok(v) = decode::<T>(KEY, data) {
        assert_eq!(&encode(KEY, &v)[..], data, "stored value is not canonical");
    }
    // 2. The bytes as a payload behind a valid frame: reaches the payload decoder.
    let direct = T::from_payload(data);
    let framed = encode_record(KEY, T::KIND, data);
    let via_frame = decode::<T>(KEY, &framed);
    assert_eq!(direct, via_frame, "framed and bare decoding disagree");
    assert!(
        decode::<T>(OTHER_KEY, &framed).is_err(),
        "a value under another key must not decode"
    );
    if let Ok(v) = direct {
        assert_eq!(&v.to_payload()[..], data, "payload does not round-trip");
        assert_eq!(encode(KEY, &v), framed, "record does not round-trip");
    }
}

/// The oracle for `Block::decode`.
pub fn check_block(data: &[u8]) {
    if let Ok(b) = Block::decode(data) {
        let again = b.encode();
        assert_eq!(&again[..], data, "block encoding is not canonical");
        assert_eq!(Block::decode(&again).as_ref(), Ok(&b));
    }
}

pub mod holding;

/// A target's check: panics when the property fails.
pub type Check = fn(&[u8]);

/// Every fuzz target, by the name of its file in `fuzz_targets/` (and of its corpus
/// directory), with the function it calls on each input.
pub const TARGETS: [(&str, Check); 11] = [
    ("decode_block", check_block),
    ("decode_block_meta", check_record::<BlockMeta>),
    ("decode_block_results", check_record::<BlockResults>),
    ("decode_block_store_state", check_record::<BlockStoreState>),
    ("decode_commit", check_record::<Commit>),
    ("decode_flush_record", check_record::<FlushRecord>),
    ("decode_hash_index", check_record::<HeightValue>),
    (
        "decode_params_info",
        check_record::<TypedHistoryEntry<ConsensusParams>>,
    ),
    ("decode_state", check_record::<State>),
    (
        "decode_validators_info",
        check_record::<TypedHistoryEntry<ValidatorSet>>,
    ),
    ("holding_ops", holding::run_bytes),
];

/// Runs target `name`'s check on `data`. Panics on an unknown name.
pub fn run_target(name: &str, data: &[u8]) {
    match TARGETS.iter().find(|(n, _)| *n == name) {
        Some((_, check)) => check(data),
        None => panic!("no fuzz target named {name:?}"),
    }
}
