//! Properties of the redb backend and the codec that no other suite pins down: each test
//! below names the mutants of `src/db/redb_db.rs` and `src/codec/` it catches (cargo-mutants;
//! the mutation section of `docs/TESTING.md` says how to run it). The codec's documented
//! bytes are checked directly:
//!
//! * the key layout's range ends and short keys (`prefix_end`, `height_of`);
//! * the record framing's "truncated" answer, with the bytes still missing, for values too
//!   short to hold a frame — even when a short value carries a valid checksum, decoding
//!   returns an error and never panics;
//! * the payload reader's bounds (`count` at exactly the bytes available, `take`'s missing
//!   byte count) and the writer and reader agreeing field by field;
//! * `RedbDb`: an integrity check that can say no, the file-system errors of creation
//!   reported (a leftover that cannot be removed, a directory that cannot be synced), the
//!   counters and path it exposes;
//! * atomic creation: at the rename, the temporary file has nothing unsynced — even when
//!   redb's own `sync_data` calls are lost (the file layer drops them), the creation's own
//!   `sync_all` makes the file durable before it gets its real name.
//!
//! Every expected answer is computed here, from `docs/FORMAT.md`'s layout (big-endian
//! heights, `version ‖ kind ‖ payload ‖ crc32(key ‖ version ‖ kind ‖ payload)`) with this
//! file's own CRC-32, never with the codec's functions.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use flushpoint::codec::keys;
use flushpoint::codec::{Reader, Writer};
use flushpoint::codec::{RecordKind, decode_record, encode_record};
use flushpoint::db::fsync_dir;
use flushpoint::fs::FileSystem;
use flushpoint::testing::SimFs;
use flushpoint::{Batch, CorruptReason, Db, Durability, ErrorKind, RedbDb, RedbOptions};

use support::fs::{Hook, HookedFs};

// ---------------------------------------------------------------------------------------
// An independent CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320), bit by bit.

fn crc32(parts: &[&[u8]]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for part in parts {
        for &b in *part {
            crc ^= u32::from(b);
            for _ in 0..8 {
                let mask = (crc & 1).wrapping_neg();
                crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
            }
        }
    }
    !crc
}

#[test]
fn the_test_crc_is_crc32_ieee() {
    // The standard check value of CRC-32/ISO-HDLC; a wrong oracle would fail here.
    assert_eq!(crc32(&[b"123456789"]), 0xCBF4_3926);
    assert_ne!(crc32(&[b"123456788"]), 0xCBF4_3926);
}

// ---------------------------------------------------------------------------------------
// Keys.

#[test]
fn prefix_end_bounds_exactly_the_keys_of_its_prefix() {
    for prefix in [
        keys::BLOCK_META,
        keys::BLOCK_PART,
        keys::RESULTS,
        keys::APP_DATA,
    ] {
        let end = keys::prefix_end(prefix);
        // Every key with the prefix sorts below the end, the largest included...
        let largest_height = keys::height_key(prefix, u64::MAX);
        assert!(
            largest_height.as_slice() < end.as_slice(),
            "prefix {prefix:#x}"
        );
        assert!([prefix, 0xff, 0xff].as_slice() < end.as_slice());
        assert!([prefix].as_slice() < end.as_slice());
        // ...and the smallest key of the next prefix does not.
        assert!(
            [prefix + 1].as_slice() >= end.as_slice(),
            "prefix {prefix:#x}"
        );
        assert_eq!(end.len(), 1);
    }
}

#[test]
fn a_key_too_short_for_a_height_has_none() {
    for prefix in [
        keys::BLOCK_META,
        keys::BLOCK_PART,
        keys::RESULTS,
        keys::PARAMS,
    ] {
        for len in 1..9 {
            let mut k = vec![0u8; len];
            k[0] = prefix;
            assert_eq!(keys::height_of(&k), None, "prefix {prefix:#x}, {len} bytes");
        }
        // Nine bytes: the height, big-endian.
        let k = [prefix, 0, 0, 0, 0, 0, 0, 0x01, 0x02];
        assert_eq!(keys::height_of(&k), Some(0x0102));
    }
    assert_eq!(keys::height_of(&[]), None);
}

#[test]
fn keys_have_the_documented_bytes() {
    let h = 0x0102_0304_0506_0708u64;
    let be = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let mut want = vec![0x10];
    want.extend_from_slice(&be);
    assert_eq!(keys::height_key(0x10, h).as_slice(), want.as_slice());
    let mut want = vec![0x02];
    want.extend_from_slice(&be);
    want.extend_from_slice(&[0, 0, 0x0a, 0x0b]);
    assert_eq!(keys::part_key(h, 0x0a0b).as_slice(), want.as_slice());
    let hash = [0x5au8; 32];
    let mut want = vec![0x05];
    want.extend_from_slice(&hash);
    assert_eq!(keys::hash_key(&hash).as_slice(), want.as_slice());
    assert_eq!(keys::singleton(0x07), [0x07]);
    assert_eq!(keys::singleton(0x21), [0x21]);
}

// ---------------------------------------------------------------------------------------
// Record framing.

/// A frame built here: `version ‖ kind ‖ payload ‖ crc32(key ‖ version ‖ kind ‖ payload)`.
fn frame(key: &[u8], version: u8, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![version, kind];
    v.extend_from_slice(payload);
    let crc = crc32(&[key, &v]);
    v.extend_from_slice(&crc.to_be_bytes());
    v
}

#[test]
fn encoding_is_the_documented_frame() {
    let key = keys::height_key(keys::BLOCK_META, 9);
    let got = encode_record(&key, RecordKind::BLOCK_META, b"abc");
    assert_eq!(&got[..], frame(&key, 1, 1, b"abc").as_slice());
    let got = encode_record(b"k", RecordKind::APP_VALUE, b"");
    assert_eq!(&got[..], frame(b"k", 1, 33, b"").as_slice());
    assert_eq!(RecordKind::GENESIS_HASH.tag(), 20);
    assert_eq!(RecordKind::BLOCK_PART.tag(), 2);
}

#[test]
fn a_value_shorter_than_a_frame_is_truncated_by_the_missing_bytes() {
    let key = b"state";
    for len in 0..6usize {
        let value = vec![0x11u8; len];
        assert_eq!(
            decode_record(key, RecordKind::STATE, &value),
            Err(CorruptReason::Truncated { needed: 6 - len }),
            "{len} bytes"
        );
    }
}

/// A value of 4 or 5 bytes whose last four are a valid checksum of what precedes them: still
/// too short to hold a version and a kind. Decoding says so; it must not index past the body.
#[test]
fn a_short_value_with_a_valid_checksum_is_truncated_not_a_panic() {
    let key = b"k";
    let mut four = Vec::new();
    four.extend_from_slice(&crc32(&[key]).to_be_bytes());
    let mut five = vec![1u8];
    five.extend_from_slice(&crc32(&[key, &[1u8]]).to_be_bytes());
    for (value, needed) in [(four, 2), (five, 1)] {
        let got = std::panic::catch_unwind(|| decode_record(key, RecordKind::STATE, &value));
        assert_eq!(
            got.ok(),
            Some(Err(CorruptReason::Truncated { needed })),
            "{value:?}"
        );
    }
    // The smallest valid frame (empty payload) decodes.
    let six = frame(key, 1, RecordKind::STATE.tag(), b"");
    assert_eq!(decode_record(key, RecordKind::STATE, &six), Ok(&b""[..]));
}

#[test]
fn decoding_names_version_and_kind_behind_a_valid_checksum() {
    let key = b"key";
    let v = frame(key, 1, RecordKind::COMMIT.tag(), b"xyz");
    assert_eq!(decode_record(key, RecordKind::COMMIT, &v), Ok(&b"xyz"[..]));
    let v = frame(key, 2, RecordKind::COMMIT.tag(), b"xyz");
    assert_eq!(
        decode_record(key, RecordKind::COMMIT, &v),
        Err(CorruptReason::UnknownVersion(2))
    );
    let v = frame(key, 1, RecordKind::STATE.tag(), b"xyz");
    assert_eq!(
        decode_record(key, RecordKind::COMMIT, &v),
        Err(CorruptReason::WrongKind {
            expected: RecordKind::COMMIT.tag(),
            found: RecordKind::STATE.tag(),
        })
    );
    let mut v = frame(key, 1, RecordKind::COMMIT.tag(), b"xyz");
    let n = v.len();
    v[n - 1] ^= 1;
    assert!(matches!(
        decode_record(key, RecordKind::COMMIT, &v),
        Err(CorruptReason::Checksum { .. })
    ));
}

// ---------------------------------------------------------------------------------------
// Payload writer and reader.

#[test]
fn writer_fields_are_big_endian_with_u32_length_prefixes() {
    let mut w = Writer::with_capacity(3);
    w.u8(0xab)
        .u32(0x0102_0304)
        .u64(0x0506_0708_090a_0b0c)
        .hash(&[0x77; 32])
        .bytes(b"hi")
        .raw(b"tail");
    let mut want = vec![0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    want.extend_from_slice(&[0x77; 32]);
    want.extend_from_slice(&[0, 0, 0, 2, b'h', b'i']);
    want.extend_from_slice(b"tail");
    assert_eq!(w.as_slice(), want.as_slice());
    assert_eq!(&w.finish()[..], want.as_slice());
    assert!(Writer::new().finish().is_empty());
}

#[test]
fn reader_reads_back_each_field_and_the_rest() {
    let mut bytes = vec![0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    bytes.extend_from_slice(&[0x77; 32]);
    bytes.extend_from_slice(&[0, 0, 0, 2, b'h', b'i']);
    bytes.extend_from_slice(b"tail");
    let mut r = Reader::new(&bytes);
    assert_eq!(r.u8(), Ok(0xab));
    assert_eq!(r.u32(), Ok(0x0102_0304));
    assert_eq!(r.u64(), Ok(0x0506_0708_090a_0b0c));
    assert_eq!(r.hash(), Ok([0x77; 32]));
    assert_eq!(r.bytes(), Ok(&b"hi"[..]));
    assert_eq!(r.rest(), b"tail");
    assert_eq!(r.rest(), b"");
    assert_eq!(r.finish(), Ok(()));
    let mut r = Reader::new(&[1, 2, 3]);
    assert_eq!(r.u8(), Ok(1));
    assert_eq!(r.finish(), Err(CorruptReason::Trailing(2)));
}

#[test]
fn reader_reports_the_bytes_missing() {
    assert_eq!(
        Reader::new(&[1, 2]).u64(),
        Err(CorruptReason::Truncated { needed: 6 })
    );
    assert_eq!(
        Reader::new(&[1, 2, 3]).u32(),
        Err(CorruptReason::Truncated { needed: 1 })
    );
    assert_eq!(
        Reader::new(&[]).u8(),
        Err(CorruptReason::Truncated { needed: 1 })
    );
    assert_eq!(
        Reader::new(&[0; 31]).hash(),
        Err(CorruptReason::Truncated { needed: 1 })
    );
    // A length prefix of 5 with 2 bytes behind it.
    assert_eq!(
        Reader::new(&[0, 0, 0, 5, 1, 2]).bytes(),
        Err(CorruptReason::Truncated { needed: 3 })
    );
    // Exactly enough is enough.
    assert_eq!(Reader::new(&[0, 0, 0, 2, 1, 2]).bytes(), Ok(&[1u8, 2][..]));
    assert_eq!(Reader::new(&[9]).u8(), Ok(9));
}

#[test]
fn count_accepts_exactly_the_items_the_bytes_can_hold() {
    for n in 0u32..4 {
        // n items of 8 bytes: exactly enough.
        let mut b = n.to_be_bytes().to_vec();
        b.extend(std::iter::repeat_n(0u8, 8 * n as usize));
        assert_eq!(Reader::new(&b).count(8), Ok(n as usize), "{n} items");
        // One byte short.
        if n > 0 {
            b.pop();
            assert!(
                matches!(Reader::new(&b).count(8), Err(CorruptReason::Invalid(_))),
                "{n} items, one byte short"
            );
        }
    }
    // Items of zero bytes count as one byte each.
    assert_eq!(Reader::new(&[0, 0, 0, 2, 0, 0]).count(0), Ok(2));
    assert!(Reader::new(&[0, 0, 0, 3, 0, 0]).count(0).is_err());
}

// ---------------------------------------------------------------------------------------
// RedbDb.

fn put(db: &RedbDb, k: &[u8], v: &[u8]) {
    let mut b = Batch::new();
    b.put(k.to_vec(), v.to_vec());
    db.write(&b, Durability::Synced).unwrap();
}

#[test]
fn a_redb_file_reports_its_path_name_size_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.redb");
    let db = RedbDb::open(&path, "app", &RedbOptions::default()).unwrap();
    assert_eq!(db.path(), Some(path.as_path()));
    assert_eq!(db.name(), "app");
    let counters = db.backend_counters();
    let before = counters.snapshot();
    put(&db, b"k", &[7u8; 4096]);
    let after = counters.snapshot();
    assert!(
        after.sync_data_calls > before.sync_data_calls,
        "a synced write syncs: {before:?} → {after:?}"
    );
    assert!(after.bytes_written >= before.bytes_written + 4096);
    assert_eq!(db.backend_counts(), after, "one set of counters");
    let size = db.disk_size_bytes().unwrap();
    // Allocated bytes: at least the value's page.
    assert!(size >= 4096, "size {size}");
}

#[test]
fn integrity_check_passes_a_sound_file_and_rejects_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let mut db = RedbDb::open(&path, "state", &RedbOptions::default()).unwrap();
    let value = vec![0x5au8; 8192];
    put(&db, b"v", &value);
    assert!(db.check_integrity().unwrap(), "a sound file passes");
    drop(db);
    // Damage the value's bytes on disk: the page's checksum no longer matches.
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes
        .windows(value.len())
        .position(|w| w == value.as_slice())
        .expect("the value is stored contiguously");
    let mut flipped = 0;
    for b in &mut bytes[at + 100..at + 200] {
        *b ^= 0xff;
        flipped += 1;
    }
    assert_eq!(flipped, 100, "the damage was done");
    std::fs::write(&path, &bytes).unwrap();
    let mut db = RedbDb::open(&path, "state", &RedbOptions::default()).unwrap();
    let got = db.check_integrity();
    assert!(
        !matches!(got, Ok(true)),
        "a damaged page must not pass the integrity check: {got:?}"
    );
}

#[test]
fn fsync_dir_reports_a_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    fsync_dir(dir.path()).unwrap();
    let e = fsync_dir(&dir.path().join("absent")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}

fn sim_with_dir() -> SimFs {
    let fs = SimFs::new();
    fs.create_dir_all(Path::new("/db")).unwrap();
    fs.sync_dir(Path::new("/")).unwrap();
    fs
}

#[test]
fn a_leftover_that_cannot_be_removed_fails_the_creation() {
    let path = Path::new("/db/app.redb");
    // Control: the same file system without the fault creates the database.
    let ok = HookedFs::with(sim_with_dir(), vec![]);
    RedbDb::open_on(Arc::new(ok), path, "app", &RedbOptions::default()).unwrap();
    let denied = HookedFs::new(sim_with_dir(), Hook::DenyRemove);
    let sim = denied.inner.clone();
    let e = RedbDb::open_on(Arc::new(denied), path, "app", &RedbOptions::default())
        .expect_err("a leftover that cannot be removed must fail the creation");
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(
        e.to_string().contains("remove leftover file"),
        "the error names the step: {e}"
    );
    assert!(!sim.exists(path).unwrap(), "nothing is created");
}

/// The creation's own `sync_all` is what makes the temporary file durable before its rename,
/// whatever redb's own syncs did. With a disk that honours redb's syncs nothing is pending at
/// the rename either way (redb 4.6 syncs its close writes); with one that loses redb's
/// `sync_data` calls on the temporary file, only the creation's `sync_all` leaves nothing
/// pending — and a crash image right after the creation then holds the complete database.
#[test]
fn the_temporary_file_has_nothing_unsynced_when_it_is_renamed() {
    let path = Path::new("/db/state.redb");
    for lose in [false, true] {
        let hooks = if lose {
            vec![Hook::LoseSyncDataOf(".creating")]
        } else {
            vec![]
        };
        let fs = HookedFs::with(sim_with_dir(), hooks);
        let sim = fs.inner.clone();
        let renames = fs.renames.clone();
        let lost_syncs = fs.lost_syncs.clone();
        let db = RedbDb::open_on(Arc::new(fs), path, "state", &RedbOptions::default()).unwrap();
        drop(db);
        // The fault fires (redb syncs the new file at its first commit and at its close), or
        // it is absent.
        let lost = lost_syncs.load(Ordering::Relaxed);
        assert_eq!(lost > 0, lose, "{lost} sync_data calls dropped");
        let renames = renames.lock().unwrap().clone();
        assert_eq!(renames.len(), 1, "one rename: {renames:?}");
        let (from, pending) = &renames[0];
        assert!(from.to_string_lossy().ends_with(".creating"), "{from:?}");
        assert_eq!(
            *pending, 0,
            "redb's syncs lost: {lose}: the renamed file had {pending} unsynced ops"
        );
        // The durable image holds a database redb opens without creating anything.
        let img = sim.crash_image(
            flushpoint::testing::DirFate::DropAll,
            flushpoint::testing::FileFate::DropAll,
        );
        let bytes = img.read(path).expect("the real name is durable");
        assert!(
            !bytes.is_empty(),
            "redb's syncs lost: {lose}: an empty file"
        );
        let db = RedbDb::open_on(Arc::new(img), path, "state", &RedbOptions::default())
            .unwrap_or_else(|e| panic!("redb's syncs lost: {lose}: {e}"));
        assert_eq!(db.get(b"absent").unwrap(), None);
    }
}
