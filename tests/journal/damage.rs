//! A journal damaged where the index says units were applied is refused, never accepted
//! The unit layout is read from `docs/FORMAT.md`: a unit is 32 + `body_len`
//! (u32 LE at 24) + 4 bytes.
//! * a segment cut at a unit boundary below what the index applied — its last unit, all but
//!   its first, or to 0 bytes; the live segment or one held for its values — is refused
//!   with `Error::JournalSegment` (kind `Corrupt`) naming the segment, nothing written;
//! * a unit the index never applied cut at a boundary (what a power cut mid-append leaves)
//!   is still the torn tail recovery discards;
//! * an index deleted beside segments, the first one retired, is refused naming
//!   `index.redb`, no new index created;
//! * recovery syncs the segment holding the units it replays before it applies and
//!   checkpoints them: a second power cut right after a recovery loses none of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::fs::{FileSystem, OpenMode};
use flushpoint::journal::{
    Applier, JournalEngine, JournalOptions, KeyspaceOptions, segment_file_name,
};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{Batch, Db, Durability, Error, ErrorKind};

const DIR: &str = "/j";

fn options(segment_bytes: u64) -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(segment_bytes)
        // Checkpoints only when the test takes one.
        .with_checkpoint_bytes(u64::MAX / 2)
        .with_applier(Applier::Inline)
        .with_prepare_segments(false)
}

fn open(fs: &SimFs, segment_bytes: u64) -> flushpoint::Result<JournalEngine> {
    JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options(segment_bytes))
}

fn put(engine: &JournalEngine, ks: &str, key: &str, value_len: usize, durability: Durability) {
    let db = engine.keyspace(ks).unwrap();
    let mut b = Batch::new();
    b.put(
        Bytes::from(key.to_string()),
        Bytes::from(vec![7u8; value_len]),
    );
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

/// The power cut right after the writes, before the engine closes.
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

fn set_len(fs: &SimFs, path: &Path, len: usize) {
    let f = fs.open_file(path, OpenMode::Existing).unwrap();
    f.set_len(len as u64).unwrap();
    f.sync_data().unwrap();
}

/// The journal's segment files and their bytes.
fn segments(fs: &SimFs) -> Vec<(String, Vec<u8>)> {
    fs.list(Path::new(DIR))
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .map(|n| {
            let bytes = fs.read(&Path::new(DIR).join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// Refused as a damaged segment naming `path`, and no segment was written (the index may
/// see redb's own repair of a crash image).
fn assert_refused(fs: &SimFs, segment_bytes: u64, path: &Path) -> String {
    let before = segments(fs);
    let err = open(fs, segment_bytes).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::JournalSegment { segment, .. } if segment == path),
        "Error::JournalSegment naming {}: {err:?}",
        path.display()
    );
    assert!(
        msg.contains("missing"),
        "the message says what is missing: {msg}"
    );
    assert_eq!(segments(fs), before, "a refused open writes no segment");
    // Refused again: the refusal is stable.
    assert!(open(fs, segment_bytes).is_err());
    msg
}

/// A journal of one segment holding units "a", "b", "c" (non-separating), all applied and
/// checkpointed; its crash image.
fn checkpointed_live_segment() -> (SimFs, Vec<usize>) {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, "ks", k, 40, Durability::Synced);
    }
    engine.checkpoint().unwrap();
    let fs = cut(&fs, engine, FileFate::DropAll);
    let offsets = unit_offsets(&fs.read(&seg(0)).unwrap());
    assert_eq!(offsets.len(), 3);
    (fs, offsets)
}

#[test]
fn the_live_segment_cut_at_a_unit_boundary_below_the_checkpoint_is_refused() {
    // Its last unit, all but its first, and every byte.
    for keep in [2usize, 1, 0] {
        let (fs, offsets) = checkpointed_live_segment();
        set_len(&fs, &seg(0), offsets.get(keep).copied().unwrap_or(0));
        let msg = assert_refused(&fs, 1 << 20, &seg(0));
        assert!(msg.contains("seq 3"), "names the applied seq: {msg}");
    }
}

#[test]
fn a_unit_past_the_checkpoint_cut_at_a_boundary_is_still_a_torn_tail() {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    for k in ["a", "b"] {
        put(&engine, "ks", k, 40, Durability::Synced);
    }
    engine.checkpoint().unwrap();
    put(&engine, "ks", "c", 40, Durability::Buffered);
    let fs = cut(&fs, engine, FileFate::KeepAll);
    let offsets = unit_offsets(&fs.read(&seg(0)).unwrap());
    assert_eq!(offsets.len(), 3);
    // What a power cut before "c"'s append reached the disk leaves.
    set_len(&fs, &seg(0), offsets[2]);
    let engine = open(&fs, 1 << 20).unwrap();
    assert!(has(&engine, "a") && has(&engine, "b") && !has(&engine, "c"));
    put(&engine, "ks", "d", 40, Durability::Synced);
    drop(engine);
    let engine = open(&fs, 1 << 20).unwrap();
    assert!(has(&engine, "d"), "the journal writes on with no seq gap");
}

/// A journal of 4 KiB segments whose values of 1000 bytes stay in the segments (a
/// separating keyspace, the block store's kind); after a checkpoint every segment but the
/// last is held for its values. Its crash image and the number of segments.
fn held_segments() -> (SimFs, u64) {
    let fs = SimFs::new();
    let engine = open(&fs, 4096).unwrap();
    engine
        .keyspace_with("parts", KeyspaceOptions::separating_values_from(64))
        .unwrap();
    for i in 0..12 {
        put(
            &engine,
            "parts",
            &format!("part{i:02}"),
            1000,
            Durability::Synced,
        );
    }
    engine.checkpoint().unwrap();
    let fs = cut(&fs, engine, FileFate::DropAll);
    let segments = (0..).take_while(|i| fs.read(&seg(*i)).is_some()).count() as u64;
    assert!(segments >= 3, "several segments: {segments}");
    // Held: the first segment is below the checkpoint and still there.
    let reopened = open(&fs, 4096).unwrap();
    let parts = reopened.keyspace("parts").unwrap();
    assert_eq!(parts.get(b"part00").unwrap().unwrap().len(), 1000);
    drop(parts);
    drop(reopened);
    (fs, segments)
}

#[test]
fn a_held_segment_cut_at_a_unit_boundary_is_refused() {
    let (fs, _) = held_segments();
    let offsets = unit_offsets(&fs.read(&seg(0)).unwrap());
    assert!(offsets.len() >= 2, "{offsets:?}");
    for keep in [offsets.len() - 1, 1, 0] {
        let image = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        set_len(&image, &seg(0), offsets.get(keep).copied().unwrap_or(0));
        assert_refused(&image, 4096, &seg(0));
    }
}

/// One unit per 100-byte segment, checkpointed: the last segment is the first one needed,
/// the ones before it retired. Gone, it took units the index applied with it.
#[test]
fn the_last_segment_missing_below_the_applied_end_is_refused() {
    let fs = SimFs::new();
    let engine = open(&fs, 100).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, "ks", k, 40, Durability::Synced);
    }
    engine.checkpoint().unwrap();
    let fs = cut(&fs, engine, FileFate::DropAll);
    assert!(fs.read(&seg(0)).is_none() && fs.read(&seg(2)).is_some());
    fs.remove_file(&seg(2)).unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
    assert_refused(&fs, 100, &seg(2));
}

#[test]
fn a_deleted_index_beside_a_retired_first_segment_is_refused_naming_it() {
    let fs = SimFs::new();
    let engine = open(&fs, 100).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, "ks", k, 40, Durability::Synced);
    }
    engine.checkpoint().unwrap();
    drop(engine);
    assert!(fs.read(&seg(0)).is_none(), "the first segment was retired");
    let index = Path::new(DIR).join(flushpoint::journal::INDEX_FILE);
    fs.remove_file(&index).unwrap();
    let listed = fs.list(Path::new(DIR));
    let before = fs.fingerprint();
    let err = open(&fs, 100).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    assert!(
        err.to_string().contains("index.redb"),
        "names the index: {err}"
    );
    assert!(
        err.to_string().contains("index missing"),
        "says it is missing: {err}"
    );
    assert_eq!(fs.list(Path::new(DIR)), listed, "no index created");
    assert_eq!(fs.fingerprint(), before, "nothing written");
}

/// Units a crashed process wrote and never synced are in the page cache when the next open
/// replays, applies and checkpoints them. Recovery makes them durable first; without that
/// sync, the power cut right after leaves a checkpoint past the segment's end.
#[test]
fn a_power_cut_right_after_a_recovery_keeps_every_unit_it_replayed() {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    put(&engine, "ks", "a", 40, Durability::Synced);
    engine.checkpoint().unwrap();
    put(&engine, "ks", "b", 40, Durability::Buffered);
    put(&engine, "ks", "c", 40, Durability::Buffered);
    // The segment as the crashed process left it in the page cache, and as the disk holds it.
    let cached = fs.read(&seg(0)).unwrap();
    let image = cut(&fs, engine, FileFate::DropAll);
    let durable = image.read(&seg(0)).unwrap();
    assert!(
        durable.len() < cached.len(),
        "the buffered units are not durable"
    );
    // The process crash: the bytes are in the page cache of the machine that goes on.
    let f = image.open_file(&seg(0), OpenMode::Existing).unwrap();
    f.write_at(durable.len() as u64, &cached[durable.len()..])
        .unwrap();
    drop(f);

    let engine = open(&image, 1 << 20).unwrap();
    assert!(has(&engine, "b") && has(&engine, "c"), "replayed");
    // The second power cut, right after the recovery's checkpoint.
    let second = cut(&image, engine, FileFate::DropAll);
    let engine = open(&second, 1 << 20)
        .unwrap_or_else(|e| panic!("the journal holds every unit the recovery checkpointed: {e}"));
    assert!(has(&engine, "a") && has(&engine, "b") && has(&engine, "c"));
}
