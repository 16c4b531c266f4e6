//! What recovery keeps, truncates and refuses, on hand-made damage (the unit layout is read
//! here from `docs/FORMAT.md`, not from the crate: magic at 0, `body_len` u32 LE at 24, a
//! unit is 32 + body_len + 4 bytes):
//! * a torn tail (the last unit cut short) is truncated: the units before it stay, the torn
//!   one is gone, and the journal writes on from there — also when it is the only unit;
//! * a damaged unit with a valid unit after it in the last segment, written when the damaged
//!   one was already durable, is refused with `Error::Corrupt` naming segment and offset;
//! * a damaged unit that is not in the last segment is refused the same way;
//! * a damaged unit followed by one written before it was durable (buffered units reordered
//!   by the page cache) is a torn tail, not corruption;
//! * a missing segment with a later one present is refused naming it, and a first segment
//!   zeroed whole is refused by the next unit's seq.
//!
//! Prepared segments (zeros written ahead, ADR 0008): the tests above run on unprepared
//! segments, whose length is their units'; on prepared ones
//! * a zero tail is kept (no truncation) and written over;
//! * a torn unit over the zeros is truncated like any torn tail;
//! * an earlier segment ending in zeros is complete, and a unit zeroed in it is refused by
//!   the next segment's seq.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::fs::{FileSystem, OpenMode};
use flushpoint::journal::{Applier, JournalEngine, JournalOptions, segment_file_name};
use flushpoint::testing::{DirFate, FileFate, SimFs};
use flushpoint::{Batch, Db, Durability, Error, ErrorKind};

const DIR: &str = "/j";

fn options(segment_bytes: u64) -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(segment_bytes)
        // No checkpoint during the test: every unit stays in the journal to be damaged.
        .with_checkpoint_bytes(u64::MAX / 2)
        .with_applier(Applier::Inline)
        .with_prepare_segments(false)
}

fn open_prepared(fs: &SimFs, segment_bytes: u64) -> flushpoint::Result<JournalEngine> {
    JournalEngine::open(
        Arc::new(fs.clone()),
        Path::new(DIR),
        options(segment_bytes).with_prepare_segments(true),
    )
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

/// A crash image of a journal of 100-byte segments holding units "a", "b" and "c", each
/// (~90 bytes) in its own segment, 0 to 2, all synced and none checkpointed.
fn three_segments() -> SimFs {
    let fs = SimFs::new();
    let engine = open(&fs, 100).unwrap();
    for k in ["a", "b", "c"] {
        put(&engine, k, Durability::Synced);
    }
    let fs = cut(&fs, engine, FileFate::DropAll);
    assert!(fs.read(&seg(2)).is_some(), "three segments");
    fs
}

fn seg(index: u64) -> PathBuf {
    Path::new(DIR).join(segment_file_name(index))
}

/// The offsets of the units in a segment's bytes, read by the documented layout.
fn unit_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = 0;
    let mut v = Vec::new();
    while at + 32 <= bytes.len() {
        if bytes[at..].iter().all(|b| *b == 0) {
            break; // a prepared segment's unused space
        }
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

/// The torn tail can be the journal's only unit, at offset 0 of its only segment, with no
/// unit before it to say what was durable: it is truncated like any torn tail (nothing was
/// applied, so nothing durable is lost), and the journal writes on from offset 0.
#[test]
fn a_torn_first_unit_is_truncated_to_an_empty_segment() {
    let fs = SimFs::new();
    let engine = open(&fs, 1 << 20).unwrap();
    put(&engine, "a", Durability::Synced);
    let fs = cut(&fs, engine, FileFate::DropAll);
    let len = fs.read(&seg(0)).unwrap().len();
    let f = fs.open_file(&seg(0), OpenMode::Existing).unwrap();
    f.set_len(len as u64 - 5).unwrap();
    f.sync_data().unwrap();
    drop(f);

    let engine = open(&fs, 1 << 20).unwrap();
    assert!(!has(&engine, "a"), "the torn unit is discarded");
    assert_eq!(fs.read(&seg(0)).unwrap().len(), 0, "truncated at offset 0");
    put(&engine, "b", Durability::Synced);
    drop(engine);
    let engine = open(&fs, 1 << 20).unwrap();
    assert!(has(&engine, "b") && !has(&engine, "a"));
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
    let index = Path::new(DIR).join(flushpoint::journal::INDEX_FILE);
    let journal_ops: Vec<_> = log[log.len() - (fs.ops() - ops) as usize..]
        .iter()
        .filter(|(_, path)| *path != index)
        .collect();
    assert_eq!(
        journal_ops,
        Vec::<&(flushpoint::testing::SimOp, PathBuf)>::new()
    );
}

#[test]
fn damaged_unit_in_an_earlier_segment_is_refused() {
    let fs = three_segments();
    // The header crc of segment 1's only unit.
    flip_byte(&fs, &seg(1), 28);
    let err = open(&fs, 100).unwrap_err();
    assert_corrupt_at(err, &seg(1), 0);
}

/// A segment is created only after the one before it is durable, so no power cut leaves a
/// segment past a missing one: a missing segment — the first live one or any later — with
/// another after it is refused naming the missing one, and the segments past it are left as
/// they were. Read up to the gap instead, the units past it would be lost and their
/// segments written over.
#[test]
fn a_missing_segment_with_a_later_one_is_refused_naming_it() {
    for missing in [0, 1] {
        let fs = three_segments();
        fs.remove_file(&seg(missing)).unwrap();
        let later = fs.read(&seg(2)).unwrap();
        let err = open(&fs, 100).unwrap_err();
        let msg = err.to_string();
        assert_corrupt_at(err, &seg(missing), 0);
        assert!(msg.contains("segment missing"), "segment {missing}: {msg}");
        assert_eq!(
            fs.read(&seg(2)),
            Some(later),
            "segment {missing}: the segment past the gap is left as it was"
        );
    }
    // The last segment missing leaves no gap: the units before it are kept (a crash can lose
    // a segment's name before its directory sync, with none of its units acknowledged).
    let fs = three_segments();
    fs.remove_file(&seg(2)).unwrap();
    let engine = open(&fs, 100).unwrap();
    assert!(has(&engine, "a") && has(&engine, "b") && !has(&engine, "c"));
}

/// An earlier segment that reads as zeros is complete (a prepared segment's unused space),
/// so a first live segment zeroed whole reads as holding no unit: the first unit recovery
/// then finds is not the one after the checkpoint, and the open is refused naming where it
/// is — not a journal started past the lost units.
#[test]
fn a_zeroed_first_segment_is_refused_by_the_next_units_seq() {
    let fs = three_segments();
    let len = fs.read(&seg(0)).unwrap().len();
    let f = fs.open_file(&seg(0), OpenMode::Existing).unwrap();
    f.write_at(0, &vec![0u8; len]).unwrap();
    f.sync_data().unwrap();
    drop(f);
    let err = open(&fs, 100).unwrap_err();
    let msg = err.to_string();
    assert_corrupt_at(err, &seg(1), 0);
    assert!(msg.contains("units missing after the checkpoint"), "{msg}");
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

#[test]
fn prepared_segment_keeps_its_zero_tail_and_truncates_a_torn_unit_over_it() {
    let fs = SimFs::new();
    let engine = open_prepared(&fs, 4096).unwrap();
    for k in ["a", "b"] {
        put(&engine, k, Durability::Synced);
    }
    let fs = cut(&fs, engine, FileFate::DropAll);
    let bytes = fs.read(&seg(0)).unwrap();
    assert_eq!(
        bytes.len(),
        4096,
        "a prepared segment is its full size from the start"
    );
    let offsets = unit_offsets(&bytes);
    assert_eq!(offsets.len(), 2);
    // A clean cut: the zero tail stays, and the journal writes on over it.
    let engine = open_prepared(&fs, 4096).unwrap();
    assert!(has(&engine, "a") && has(&engine, "b"));
    assert_eq!(fs.read(&seg(0)).unwrap().len(), 4096, "zero tail kept");
    put(&engine, "c", Durability::Synced);
    let fs = cut(&fs, engine, FileFate::DropAll);
    let engine = open_prepared(&fs, 4096).unwrap();
    assert!(has(&engine, "c"));
    let fs = cut(&fs, engine, FileFate::DropAll);
    // A torn unit over the zeros: its first bytes landed, the rest is zeros.
    let bytes = fs.read(&seg(0)).unwrap();
    let offsets = unit_offsets(&bytes);
    let end = offsets[2]
        + 32
        + u32::from_le_bytes(bytes[offsets[2] + 24..offsets[2] + 28].try_into().unwrap()) as usize
        + 4;
    let f = fs.open_file(&seg(0), OpenMode::Existing).unwrap();
    f.write_at(end as u64, b"FPJ1\x01\0\0\0torn").unwrap();
    f.sync_data().unwrap();
    drop(f);
    let engine = open_prepared(&fs, 4096).unwrap();
    assert!(has(&engine, "a") && has(&engine, "b") && has(&engine, "c"));
    assert_eq!(
        fs.read(&seg(0)).unwrap().len(),
        end,
        "the torn unit is truncated with the tail"
    );
}

#[test]
fn an_earlier_prepared_segment_ends_at_its_zeros_and_a_zeroed_unit_in_it_is_refused() {
    let fs = SimFs::new();
    // 200-byte segments: two ~90-byte units fit in one, the third rolls.
    let engine = open_prepared(&fs, 200).unwrap();
    for k in ["a", "b", "c", "d", "e"] {
        put(&engine, k, Durability::Synced);
    }
    // Two images of the same cut: one recovered as it is, one damaged.
    let damaged = fs.crash_image(DirFate::KeepAll, FileFate::DropAll);
    let fs = cut(&fs, engine, FileFate::DropAll);
    assert!(fs.read(&seg(1)).is_some(), "several segments");
    // Every earlier segment ends in zeros; recovery accepts them.
    let engine = open_prepared(&fs, 200).unwrap();
    for k in ["a", "b", "c", "d", "e"] {
        assert!(has(&engine, k), "{k}");
    }
    drop(engine);
    let fs = damaged;
    // Zero the last unit of segment 0: it reads as unused space, but segment 1's first
    // unit no longer follows the last seq of segment 0.
    let bytes = fs.read(&seg(0)).unwrap();
    let offsets = unit_offsets(&bytes);
    let last = *offsets.last().unwrap();
    let f = fs.open_file(&seg(0), OpenMode::Existing).unwrap();
    f.write_at(last as u64, &vec![0u8; bytes.len() - last])
        .unwrap();
    f.sync_data().unwrap();
    drop(f);
    let err = open_prepared(&fs, 200).unwrap_err();
    assert_corrupt_at(err, &seg(1), 0);
}

/// A unit that was applied (and checkpointed) was durable: damage to it in the last
/// segment is corruption, refused naming segment and offset — never a torn tail to write
/// over (the values a separating keyspace's index points at may lie there, ADR 0013).
/// Checked for the first unit (no valid unit before it: the checkpoint's recorded end of
/// the applied units decides) and for a later one (its seq is at most `applied_seq`).
#[test]
fn an_applied_unit_damaged_in_the_last_segment_is_refused_not_truncated() {
    for damaged in [0usize, 1] {
        let fs = SimFs::new();
        let engine = open(&fs, 1 << 20).unwrap();
        put(&engine, "a", Durability::Synced);
        // Buffered: no later unit's `synced_through` vouches for them.
        put(&engine, "b", Durability::Buffered);
        put(&engine, "c", Durability::Buffered);
        engine.checkpoint().unwrap();
        drop(engine);
        let offsets = unit_offsets(&fs.read(&seg(0)).unwrap());
        assert_eq!(offsets.len(), 3);
        flip_byte(&fs, &seg(0), offsets[damaged] + 40);
        let before = fs.read(&seg(0)).unwrap();
        let err = open(&fs, 1 << 20).unwrap_err();
        assert_corrupt_at(err, &seg(0), offsets[damaged]);
        assert_eq!(fs.read(&seg(0)).unwrap(), before, "nothing truncated");
    }
}

/// Values of a unit larger than the encoder's 1 MiB chunk: written in several pieces.
fn big_batch(name: &str, fill: u8) -> Batch {
    let mut b = Batch::new();
    for i in 0..3u8 {
        b.put(
            Bytes::from(format!("{name}/{i}")),
            Bytes::from(vec![fill.wrapping_add(i); 700 * 1024]),
        );
    }
    b
}

/// Whether `name/0..3` hold the values `big_batch(name, fill)` wrote (`None`: absent).
fn big_values(db: &dyn Db, name: &str, fill: u8) -> Vec<Option<bool>> {
    (0..3u8)
        .map(|i| {
            let v = db.get(format!("{name}/{i}").as_bytes()).unwrap()?;
            Some(v.len() == 700 * 1024 && v.iter().all(|b| *b == fill.wrapping_add(i)))
        })
        .collect()
}

#[test]
fn a_unit_written_in_several_chunks_recovers_whole_or_is_torn_off() {
    let fs = SimFs::new();
    let engine = open(&fs, 64 << 20).unwrap();
    let db = engine.keyspace("ks").unwrap();
    // Synced: durable whole. Then a second one, buffered: the cut may tear it anywhere.
    db.write(&big_batch("a", 1), Durability::Synced).unwrap();
    db.write(&big_batch("b", 100), Durability::Buffered)
        .unwrap();
    let seg0 = fs.read(&seg(0)).unwrap();
    assert_eq!(
        unit_offsets(&seg0).len(),
        2,
        "two units, one after the other"
    );
    drop(db);
    let mut torn_off = 0;
    for files in [FileFate::DropAll, FileFate::KeepAll]
        .into_iter()
        .chain((0..16).map(FileFate::Random))
    {
        let image = fs.crash_image(DirFate::KeepAll, files);
        let engine = open(&image, 64 << 20).unwrap();
        let db = engine.keyspace("ks").unwrap();
        assert_eq!(
            big_values(&*db, "a", 1),
            vec![Some(true); 3],
            "{files:?}: the synced unit"
        );
        // The buffered unit: all of it or none (its pieces are never read half).
        let second = big_values(&*db, "b", 100);
        match second[..] {
            [Some(true), Some(true), Some(true)] => {}
            [None, None, None] => torn_off += 1,
            _ => panic!("{files:?}: part of a unit: {second:?}"),
        }
        if files == FileFate::KeepAll {
            assert_eq!(second, vec![Some(true); 3], "every byte reached the disk");
        }
        if files == FileFate::DropAll {
            assert_eq!(second, vec![None; 3], "none of it reached the disk");
        }
    }
    assert!(torn_off >= 1, "no cut took the second unit off");
    drop(engine);
}

/// A checkpoint trims exactly the segments wholly applied, at the boundary too: a segment
/// whose last unit is the last one applied goes, while the next segment's first unit is not
/// yet durable. What is past the checkpoint then recovers after a cut. Found by mutation
/// testing: the boundary's `>` as `>=` (and `next_first_seq - 1` as `+ 1` or `/ 1`) kept
/// that segment a checkpoint longer, and no test saw it.
#[test]
fn a_checkpoint_at_a_segment_boundary_trims_the_segment_wholly_applied() {
    let fs = SimFs::new();
    let options = options(100)
        // Every step that applies something checkpoints.
        .with_checkpoint_bytes(1);
    let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options).unwrap();
    let before = engine.counts();
    // ~90-byte units, one per 100-byte segment. "a" goes to segment 0, buffered; "b",
    // buffered, rolls: the roll syncs segment 0, so "a" is durable and applied, and its
    // step's checkpoint sees segment 1 begin with "b", not durable, not applied.
    put(&engine, "a", Durability::Buffered);
    assert_eq!(
        engine.counts().checkpoints,
        before.checkpoints,
        "nothing durable yet"
    );
    put(&engine, "b", Durability::Buffered);
    let c = engine.counts();
    assert!(fs.read(&seg(1)).is_some(), "\"b\" rolled to segment 1");
    assert_eq!(c.checkpoints - before.checkpoints, 1, "{c:?}");
    assert_eq!(
        c.segments_deleted, 1,
        "segment 0 wholly applied: trimmed; {c:?}"
    );
    assert!(fs.read(&seg(0)).is_none(), "segment 0 deleted");
    // "c", synced, rolls to segment 2 and makes "b" durable too: both applied, segment 1
    // trimmed in its turn.
    put(&engine, "c", Durability::Synced);
    let c = engine.counts();
    assert_eq!(c.segments_deleted, 2, "segment 1 trimmed too; {c:?}");
    assert!(fs.read(&seg(1)).is_none(), "segment 1 deleted");
    // After a cut all three are there.
    let image = cut(&fs, engine, FileFate::DropAll);
    let engine = open(&image, 100).unwrap();
    for k in ["a", "b", "c"] {
        assert!(has(&engine, k), "{k} after the cut");
    }
}
