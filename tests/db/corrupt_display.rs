//! `Error::Corrupt` reads as a sentence: the height only when known ("at height 12"), the
//! key only when not empty, as quoted text when printable ASCII (a journal file name, a
//! meta key) and as `0x` hex otherwise; never Rust's `None` or an empty "at key".

use flushpoint::{CorruptReason, Error};

fn corrupt(key: &[u8], height: Option<u64>) -> String {
    Error::Corrupt {
        db: "block store".into(),
        key: key.to_vec(),
        height,
        reason: CorruptReason::Trailing(3),
    }
    .to_string()
}

#[test]
fn a_binary_key_is_hex_and_a_known_height_is_said() {
    assert_eq!(
        corrupt(&[0x62, 0x00, 0x00, 0x0c], Some(12)),
        "database block store: corrupt record at height 12, key 0x6200000c: 3 trailing bytes after the last field"
    );
    assert_eq!(
        corrupt(&[0x00, 0xff], None),
        "database block store: corrupt record at key 0x00ff: 3 trailing bytes after the last field"
    );
}

#[test]
fn a_printable_key_is_text() {
    assert_eq!(
        corrupt(b"00000000000000000003.seg", None),
        "database block store: corrupt record at key \"00000000000000000003.seg\": 3 trailing bytes after the last field"
    );
    assert_eq!(
        corrupt(b"meta:\"q\"", Some(7)),
        "database block store: corrupt record at height 7, key \"meta:\\\"q\\\"\": 3 trailing bytes after the last field"
    );
    // A tab or a byte past ASCII is not printable: hex.
    assert!(corrupt(b"a\tb", None).contains("at key 0x610962:"));
    assert!(corrupt("é".as_bytes(), None).contains("at key 0xc3a9:"));
}

#[test]
fn no_key_and_no_height_leave_only_the_database_and_the_reason() {
    assert_eq!(
        corrupt(&[], None),
        "database block store: corrupt record: 3 trailing bytes after the last field"
    );
    assert_eq!(
        corrupt(&[], Some(4)),
        "database block store: corrupt record at height 4: 3 trailing bytes after the last field"
    );
    for text in [
        corrupt(&[], None),
        corrupt(b"k", None),
        corrupt(&[1], Some(1)),
    ] {
        assert!(!text.contains("None") && !text.contains("Some"), "{text}");
    }
}
