//! Shared checks for the flushpoint fuzz targets. Each target in `fuzz_targets/` is a
//! one-line call into this file, so every record decoder gets the same oracle:
//!
//! * decoding arbitrary bytes never panics (neither as a stored, framed value nor as a
//!   bare payload behind a valid frame);
//! * when decoding succeeds, encoding the value gives back exactly the input bytes
//!   (the codec is canonical), and the framed and bare paths agree;
//! * a framed value read under another key of the same length is rejected.

use std::fmt::Debug;

use flushpoint::codec::encode_record;
use flushpoint::{Block, Record, decode, encode};

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
