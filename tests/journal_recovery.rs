//! What recovery keeps, truncates and refuses, on hand-made damage (the unit layout is read
//! here from `docs/FORMAT.md`, not from the crate: magic at 0, `body_len` u32 LE at 24, a
//! unit is 32 + body_len + 4 bytes):
//! * a torn tail (the last unit cut short) is truncated: the units before it stay, the torn
//!   one is gone, and the journal writes on from there;
//! * a damaged unit with a valid unit after it in the last segment, written when the damaged
//!   one was already durable, is refused with `Error::Corrupt` naming segment and offset;
//! * a damaged unit that is not in the last segment is refused the same way;
//! * a damaged unit followed by one written before it was durable (buffered units reordered
//!   by the page cache) is a torn tail, not corruption.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::{
    Applier, Batch, Db, DirFate, Durability, Error, ErrorKind, FileFate, FileSystem, JournalEngine,
    JournalOptions, OpenMode, SimFs, segment_file_name,
};

const DIR: &str = "/j";

fn options(segment_bytes: u64) -> JournalOptions {
    JournalOptions {
        segment_bytes,
        // No checkpoint during the test: every unit stays in the journal to be damaged.
        checkpoint_bytes: u64::MAX / 2,
        applier: Applier::Inline,
        ..JournalOptions::default()
    }
}

fn open(fs: &SimFs, segment_bytes: u64) -> flushpoint::Result<JournalEngine> {
    JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options(segment_bytes))
}

fn put(engine: &JournalEngine, key: &str, durability: Durability) {
    let db = engine.keyspace("ks").unwrap();
    let mut b = Batch::new();
    b.put(Bytes::from(key.to_string()), Bytes::from(vec![7u8; 40]));
    db.write(&b, durability).unwrap();
}

fn has(engine: &JournalEngine, key: &str) -> bool {
    engine
        .keyspace("ks")
        .unwrap()
        .get(key.as_bytes())
        .unwrap()
        .is_some()
}

/// The power cut right after the writes, before the engine closes (a clean close would
/// checkpoint and trim them): unsynced file bytes `files`, directory entries kept.
fn cut(fs: &SimFs, engine: JournalEngine, files: FileFate) -> SimFs {
    let image = fs.crash_image(DirFate::KeepAll, files);
    drop(engine);
    image
}

fn seg(index: u64) -> PathBuf {
    Path::new(DIR).join(segment_file_name(index))
}

/// The offsets of the units in a segment's bytes, read by the documented layout.
fn unit_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut v = Vec::new();
    while at + 32 <= bytes.len() {
        assert_eq!(&bytes[at..at + 4], b"FPJ1", "unit magic at {at}");
        v.push(at);
        let body_len = u32::from_le_bytes(bytes[at + 24..at + 28].try_into().unwrap()) as usize;
        at += 32 + body_len + 4;
    }
    v
}

fn flip_byte(fs: &SimFs, path: &Path, offset: usize) {
    let f = fs.open_file(path, OpenMode::Existing).unwrap();
    let mut b = [0u8];
    f.read_at(offset as u64, &mut b).unwrap();
    f.write_at(offset as u64, &[b[0] ^ 0x5a]).unwrap();
    f.sync_data().unwrap();
}

fn assert_corrupt_at(err: Error, path: &Path, offset: usize) {
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains(&format!("offset {offset}")),
        "the error names segment {} and offset {offset}: {msg}",
        path.display()
    );
    match err {
        Error::Corrupt { key, .. } => assert_eq!(
            key,
            path.file_name().unwrap().to_string_lossy().as_bytes(),
            "the key is the segment's file name"
        ),
        other => panic!("not Error::Corrupt: {other:?}"),
    }
}

#[test]
fn torn_tail_is_truncated_and_the_journal_writes_on() {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, k, Durability::Synced);
    }
    let fs = cut(&fs, engine, FileFate::DropAll);
    let bytes = fs.read(&seg(0)).unwrap();
    let offsets = unit_offsets(&bytes);
    assert_eq!(offsets.len(), 3);
    // Cut the last unit short: a torn append.
    let f = fs.open_file(&seg(0), OpenMode::Existing).unwrap();
    f.set_len(bytes.len() as u64 - 5).unwrap();
    f.sync_data().unwrap();
    drop(f);

    let engine = open(&fs, 1 << 20).unwrap();
    assert!(has(&engine, "a") && has(&engine, "b"));
    assert!(!has(&engine, "c"), "the torn unit is discarded");
    assert_eq!(
        fs.read(&seg(0)).unwrap().len(),
        offsets[2],
        "the segment is truncated at the torn unit"
    );
    put(&engine, "d", Durability::Synced);
    drop(engine);
    let engine = open(&fs, 1 << 20).unwrap();
    assert!(has(&engine, "a") && has(&engine, "b") && has(&engine, "d") && !has(&engine, "c"));
}

#[test]
fn damaged_unit_before_a_later_valid_unit_is_refused_naming_segment_and_offset() {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, k, Durability::Synced);
    }
    let fs = cut(&fs, engine, FileFate::DropAll);
    let offsets = unit_offsets(&fs.read(&seg(0)).unwrap());
    // The middle unit's body: unit "c" after it was written once "b" was durable.
    flip_byte(&fs, &seg(0), offsets[1] + 40);
    let before = fs.read(&seg(0)).unwrap();
    let ops = fs.ops();
    let err = open(&fs, 1 << 20).unwrap_err();
    assert_corrupt_at(err, &seg(0), offsets[1]);
    assert_eq!(
        fs.read(&seg(0)).unwrap(),
        before,
        "the segment is untouched"
    );
    // redb's own repair of the index (a crash left it unclosed) writes it; nothing else is
    // touched: no segment written, truncated, synced or deleted.
    let log = fs.stats().log;
    let index = Path::new(DIR).join(flushpoint::INDEX_FILE);
    let journal_ops: Vec<_> = log[log.len() - (fs.ops() - ops) as usize..]
        .iter()
        .filter(|(_, path)| *path != index)
        .collect();
    assert_eq!(journal_ops, Vec::<&(flushpoint::SimOp, PathBuf)>::new());
}

#[test]
fn damaged_unit_in_an_earlier_segment_is_refused() {
    let fs = SimFs::new();
    // 100-byte segments: each unit (~90 bytes) gets its own segment.
    let engine = open(&fs, 100).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, k, Durability::Synced);
    }
    let fs = cut(&fs, engine, FileFate::DropAll);
    assert!(fs.read(&seg(2)).is_some(), "three segments");
    // The header crc of segment 1's only unit.
    flip_byte(&fs, &seg(1), 28);
    let err = open(&fs, 100).unwrap_err();
    assert_corrupt_at(err, &seg(1), 0);
}

#[test]
fn damaged_unit_followed_only_by_units_written_before_it_was_durable_is_a_torn_tail() {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    put(&engine, "a", Durability::Synced);
    // Two buffered units: "c" was written while "b" was not yet durable.
    put(&engine, "b", Durability::Buffered);
    put(&engine, "c", Durability::Buffered);
    // A process crash: the buffered units reached the file, unsynced.
    let fs = cut(&fs, engine, FileFate::KeepAll);
    let offsets = unit_offsets(&fs.read(&seg(0)).unwrap());
    assert_eq!(offsets.len(), 3);
    flip_byte(&fs, &seg(0), offsets[1] + 40);
    let engine = open(&fs, 1 << 20).unwrap();
    assert!(has(&engine, "a"));
    assert!(
        !has(&engine, "b") && !has(&engine, "c"),
        "both discarded with the tail"
    );
}
