//! Values kept in the journal (ADR 0013): a separating keyspace's values at or above its
//! threshold are written once, to the journal, and the index points at them.
//!
//! * they read back the same from the overlay, after the apply (through the pointer) and
//!   after a reopen, beside inline values below the threshold;
//! * a segment is kept while a pointer into it remains, and deleted by the checkpoint after
//!   the last one goes: the space comes back;
//! * a reader's snapshot keeps the segments its pointers lead to until it is dropped;
//! * a value whose bytes changed on disk is refused as corrupt (the pointer's crc32), and a
//!   missing segment likewise: never wrong bytes;
//! * a leftover segment no pointer holds is deleted on open; one holding values is kept;
//! * options are fixed at creation: a bad threshold is refused with nothing written, and an
//!   existing keyspace keeps its own.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::fs::{FileSystem, OpenMode};
use flushpoint::journal::{
    Applier, JournalEngine, JournalOptions, KeyspaceOptions, SEPARATE_VALUES_MIN_BYTES,
    segment_file_name,
};
use flushpoint::testing::SimFs;
use flushpoint::{Batch, Db, Direction, Durability, Error, KeyRange};

const DIR: &str = "/journal";
/// The threshold in these tests.
const FROM: u32 = 1024;
/// A part's size here: above the threshold.
const PART_BYTES: usize = 2000;
/// Small segments: each holds a few parts.
const SEGMENT_BYTES: u64 = 8 * 1024;

fn options() -> JournalOptions {
    JournalOptions::default()
        .with_applier(Applier::Inline)
        .with_segment_bytes(SEGMENT_BYTES)
        .with_checkpoint_bytes(1 << 30)
        .with_index_cache_bytes(256 * 1024)
}

fn open(fs: &SimFs) -> JournalEngine {
    open_with(fs, options())
}

fn open_with(fs: &SimFs, options: JournalOptions) -> JournalEngine {
    JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options).expect("open")
}

fn part(i: u32) -> Bytes {
    Bytes::from(
        (0..PART_BYTES)
            .map(|j| (i as usize * 31 + j * 7) as u8)
            .collect::<Vec<u8>>(),
    )
}

fn key(i: u32) -> Bytes {
    Bytes::from(format!("part/{i:04}"))
}

/// Writes parts `range` (one synced unit each) and a small value beside each.
fn write_parts(db: &dyn Db, range: std::ops::Range<u32>) {
    for i in range {
        let mut b = Batch::new();
        b.put(key(i), part(i));
        b.put(
            Bytes::from(format!("meta/{i:04}")),
            Bytes::from_static(b"m"),
        );
        db.write(&b, Durability::Synced).expect("write");
    }
}

fn delete_parts(db: &dyn Db, range: std::ops::Range<u32>) {
    let mut b = Batch::new();
    for i in range {
        b.delete(key(i));
    }
    db.write(&b, Durability::Synced).expect("delete");
}

fn segments_on_disk(fs: &SimFs) -> Vec<String> {
    fs.list(Path::new(DIR))
        .into_iter()
        .filter(|n| n.ends_with(".seg"))
        .collect()
}

fn separating(engine: &JournalEngine) -> Arc<flushpoint::journal::JournalDb> {
    engine
        .keyspace_with("blocks", KeyspaceOptions::separating_values_from(FROM))
        .expect("keyspace")
}

#[test]
fn values_read_back_from_the_overlay_the_pointer_and_after_a_reopen() {
    let fs = SimFs::new();
    let engine = open_with(
        &fs,
        options()
            .with_applier(Applier::Background)
            .with_apply_batch_delay(std::time::Duration::from_secs(3600)),
    );
    let db = separating(&engine);
    assert_eq!(db.options(), KeyspaceOptions::separating_values_from(FROM));
    write_parts(&*db, 0..3);
    // Not applied yet (the applier waits an hour): the overlay answers.
    assert_eq!(db.get(&key(1)).unwrap(), Some(part(1)));
    assert_eq!(engine.counts().values_kept_in_journal, 0);
    engine.checkpoint().unwrap();
    let c = engine.counts();
    assert_eq!(c.values_kept_in_journal, 3, "{c:?}");
    // Applied: through the pointer; the small values inline.
    assert_eq!(db.get(&key(1)).unwrap(), Some(part(1)));
    assert_eq!(
        db.get(b"meta/0001").unwrap(),
        Some(Bytes::from_static(b"m"))
    );
    assert_eq!(engine.counts().values_read_from_journal, 1);
    let all = collect_range(&*db, KeyRange::all(), Direction::Reverse).unwrap();
    assert_eq!(all.len(), 6);
    // Reverse: the parts first, highest key first.
    assert!(all[0] == (key(2), part(2)) && all[3].0 == b"meta/0002"[..]);
    drop(db);
    drop(engine);
    let engine = open(&fs);
    // `keyspace` (no options) finds the keyspace separating, as it was created.
    let db = engine.keyspace("blocks").unwrap();
    assert_eq!(db.options(), KeyspaceOptions::separating_values_from(FROM));
    for i in 0..3 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(part(i)), "part {i}");
    }
    // The index holds a pointer, not the part: it is far smaller than the parts.
    let index = fs.read(&Path::new(DIR).join("index.redb")).unwrap();
    let p = part(0);
    assert!(
        !index.windows(64).any(|w| w == &p[..64]),
        "a part's bytes are in the index"
    );
}

#[test]
fn a_segment_is_kept_while_pointers_lead_into_it_and_deleted_after_the_last_goes() {
    let fs = SimFs::new();
    let engine = open(&fs);
    let db = separating(&engine);
    write_parts(&*db, 0..24);
    engine.checkpoint().unwrap();
    let c = engine.counts();
    assert!(c.dir_sync_calls >= 5, "segments rolled: {c:?}");
    // Every segment below the active one is past the checkpoint, but holds parts.
    assert_eq!(c.segments_deleted, 0, "{c:?}");
    assert!(c.segments_kept_for_values >= 4, "{c:?}");
    // Each checkpoint counts the segments it keeps for their values: here every one on
    // disk but the active one.
    let kept_before = c.segments_kept_for_values;
    assert_eq!(kept_before, segments_on_disk(&fs).len() as u64 - 1, "{c:?}");
    let before = engine.disk_size_bytes().unwrap();
    let segments_before = segments_on_disk(&fs);
    // Pruning the first half: the segments holding only those parts come back.
    delete_parts(&*db, 0..12);
    engine.checkpoint().unwrap();
    let c = engine.counts();
    assert!(c.segments_deleted >= 2, "{c:?}");
    // The deleted ones are not counted as kept; the rest, but the active one, are.
    assert_eq!(
        c.segments_kept_for_values - kept_before,
        segments_on_disk(&fs).len() as u64 - 1,
        "{c:?}"
    );
    let after = engine.disk_size_bytes().unwrap();
    assert!(
        after < before,
        "disk bytes {before} → {after}: space came back"
    );
    assert_eq!(
        segments_on_disk(&fs).len() as u64,
        segments_before.len() as u64 - c.segments_deleted
    );
    // The first segment is gone; the parts still indexed read back.
    assert!(!segments_on_disk(&fs).contains(&segment_file_name(0)));
    for i in 12..24 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(part(i)), "part {i}");
    }
    assert_eq!(db.get(&key(3)).unwrap(), None);
    drop(db);
    drop(engine);
    let engine = open(&fs);
    let db = engine.keyspace("blocks").unwrap();
    for i in 12..24 {
        assert_eq!(
            db.get(&key(i)).unwrap(),
            Some(part(i)),
            "part {i} after reopen"
        );
    }
    // Pruning everything: every segment but the active one goes.
    delete_parts(&*db, 12..24);
    engine.checkpoint().unwrap();
    assert_eq!(
        segments_on_disk(&fs).len(),
        1,
        "{:?}",
        segments_on_disk(&fs)
    );
}

#[test]
fn a_reader_keeps_the_segments_its_snapshot_points_into_until_it_is_dropped() {
    let fs = SimFs::new();
    let engine = open(&fs);
    let db = separating(&engine);
    write_parts(&*db, 0..12);
    engine.checkpoint().unwrap();
    let mut it = db
        .range(KeyRange::prefix(b"part/"), Direction::Forward)
        .unwrap();
    let first = it.next().unwrap().unwrap();
    assert_eq!(first, (key(0), part(0)));
    // Every part deleted and checkpointed while the iterator lives, in two halves (each
    // checkpoint dooms segments in its own epoch, the second one after the reader's):
    // nothing is unlinked. Found by mutation testing: with one checkpoint only, a pin
    // compared the wrong way (`p < epoch`) still kept the segments.
    delete_parts(&*db, 0..6);
    engine.checkpoint().unwrap();
    delete_parts(&*db, 6..12);
    engine.checkpoint().unwrap();
    assert_eq!(engine.counts().segments_deleted, 0);
    let rest: Vec<_> = it.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(rest.len(), 11);
    assert_eq!(rest[10], (key(11), part(11)));
    drop(it);
    // The last reader of the old snapshot let them go.
    assert!(
        engine.counts().segments_deleted >= 2,
        "{:?}",
        engine.counts()
    );
    assert_eq!(db.get(&key(5)).unwrap(), None);
}

/// Finds `needle` in the file at `path` (the test's way to find a part's bytes on disk).
fn find(fs: &SimFs, path: &Path, needle: &[u8]) -> Option<usize> {
    fs.read(path)?
        .windows(needle.len())
        .position(|w| w == needle)
}

#[test]
fn a_changed_or_missing_value_is_refused_as_corrupt_never_returned() {
    let fs = SimFs::new();
    let engine = open(&fs);
    let db = separating(&engine);
    write_parts(&*db, 0..8);
    engine.checkpoint().unwrap();
    // One byte of part 2 changed in its segment.
    let p = part(2);
    let seg = segments_on_disk(&fs)
        .into_iter()
        .map(|n| Path::new(DIR).join(n))
        .find(|path| find(&fs, path, &p).is_some())
        .expect("part 2 is in a segment");
    let at = find(&fs, &seg, &p).unwrap() + 100;
    let f = fs.open_file(&seg, OpenMode::Existing).unwrap();
    f.write_at(at as u64, &[p[100] ^ 0x40]).unwrap();
    match db.get(&key(2)) {
        Err(Error::Corrupt { key: k, reason, .. }) => {
            assert_eq!(k, key(2).to_vec());
            assert!(reason.to_string().contains("checksum"), "{reason}");
        }
        other => panic!("a changed part must be refused: {other:?}"),
    }
    // Its neighbours are intact.
    assert_eq!(db.get(&key(3)).unwrap(), Some(part(3)));
    // A missing segment: the part in it is refused, not returned empty.
    fs.remove_file(&seg).unwrap();
    match db.get(&key(2)) {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(reason.to_string().contains("missing"), "{reason}")
        }
        other => panic!("a part in a missing segment must be refused: {other:?}"),
    }
    drop(db);
    drop(engine);
    // Recovery refuses a home whose held segment is missing, naming it.
    match JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options()) {
        Err(Error::Corrupt { db, reason, .. }) => {
            assert!(db.contains(".seg"), "{db}");
            assert!(reason.to_string().contains("missing"), "{reason}");
        }
        other => panic!("open with a held segment missing must be refused: {other:?}"),
    }
}

#[test]
fn on_open_a_leftover_segment_no_pointer_holds_is_deleted_and_one_holding_values_is_kept() {
    let fs = SimFs::new();
    let engine = open(&fs);
    let db = separating(&engine);
    write_parts(&*db, 0..16);
    engine.checkpoint().unwrap();
    delete_parts(&*db, 0..6);
    let dir = Path::new(DIR);
    // Copies of every segment before the trim, to put back as "unlinks lost in a crash".
    let copies: Vec<(String, Vec<u8>)> = segments_on_disk(&fs)
        .into_iter()
        .map(|n| {
            let bytes = fs.read(&dir.join(&n)).unwrap();
            (n, bytes)
        })
        .collect();
    engine.checkpoint().unwrap();
    let deleted = engine.counts().segments_deleted;
    assert!(deleted >= 1);
    drop(db);
    drop(engine);
    let survivors = segments_on_disk(&fs);
    let mut resurrected = 0;
    for (name, bytes) in &copies {
        if !survivors.contains(name) {
            let f = fs
                .open_file(&dir.join(name), OpenMode::CreateTruncate)
                .unwrap();
            f.write_at(0, bytes).unwrap();
            resurrected += 1;
        }
    }
    assert_eq!(resurrected, deleted);
    let engine = open(&fs);
    assert_eq!(
        segments_on_disk(&fs),
        survivors,
        "leftovers deleted, held kept"
    );
    let db = engine.keyspace("blocks").unwrap();
    for i in 6..16 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(part(i)), "part {i}");
    }
}

#[test]
fn options_are_checked_before_anything_is_written_and_fixed_at_creation() {
    let fs = SimFs::new();
    let engine = open(&fs);
    let ops = fs.ops();
    match engine.keyspace_with(
        "blocks",
        KeyspaceOptions::separating_values_from(SEPARATE_VALUES_MIN_BYTES - 1),
    ) {
        Err(Error::InvalidInput(msg)) => assert!(msg.contains("blocks"), "{msg}"),
        other => panic!("a threshold below the minimum must be refused: {other:?}"),
    }
    assert_eq!(fs.ops(), ops, "nothing written");
    // A keyspace that exists without separation keeps it.
    let plain = engine.keyspace("plain").unwrap();
    write_parts(&*plain, 0..2);
    let again = engine
        .keyspace_with("plain", KeyspaceOptions::separating_values_from(FROM))
        .unwrap();
    assert_eq!(again.options(), KeyspaceOptions::default());
    engine.checkpoint().unwrap();
    assert_eq!(engine.counts().values_kept_in_journal, 0);
    assert_eq!(again.get(&key(1)).unwrap(), Some(part(1)));
    // A separating one keeps its threshold when asked for another.
    let sep = separating(&engine);
    let other = engine
        .keyspace_with("blocks", KeyspaceOptions::separating_values_from(4 * FROM))
        .unwrap();
    assert_eq!(other.options(), sep.options());
    assert_eq!(sep.options(), KeyspaceOptions::separating_values_from(FROM));
}

#[test]
fn recovery_refuses_a_missing_segment_the_index_points_into_past_the_checkpoint() {
    let fs = SimFs::new();
    let engine = open_with(&fs, options().with_segment_bytes(1 << 20));
    let db = separating(&engine);
    write_parts(&*db, 0..4);
    drop(db);
    // A clean close: applied and checkpointed; the parts are in the active segment.
    drop(engine);
    let seg0 = Path::new(DIR).join(segment_file_name(0));
    assert!(find(&fs, &seg0, &part(3)).is_some());
    fs.remove_file(&seg0).unwrap();
    match JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options()) {
        Err(Error::JournalSegment { segment, problem }) => {
            assert_eq!(segment, seg0);
            assert!(problem.contains("missing"), "{problem}");
        }
        other => panic!("a missing segment holding indexed values must be refused: {other:?}"),
    }
}

/// A held segment gives back the file-system blocks its kept values do not touch: the
/// other keyspaces' values (applied to the index), unit headers, the prepared tail. The
/// parts read back the same, before and after a reopen.
#[test]
fn a_held_segment_gives_back_the_space_around_its_kept_values() {
    let fs = SimFs::new();
    let engine = open_with(&fs, options().with_segment_bytes(32 * 1024));
    let blocks = separating(&engine);
    let state = engine.keyspace("state").unwrap();
    // Each unit: a part kept in the journal, and 6 KiB of state applied to the index.
    let filler = |i: u32| Bytes::from(vec![0xa5 ^ (i as u8); 6 * 1024]);
    for i in 0..16 {
        let mut b = Batch::new();
        b.put(key(i), part(i));
        let mut s = Batch::new();
        s.put(Bytes::from(format!("state/{i:04}")), filler(i));
        engine
            .commit(&[("blocks", &b), ("state", &s)], Durability::Synced)
            .unwrap();
    }
    engine.checkpoint().unwrap();
    let c = engine.counts();
    assert!(c.segments_kept_for_values >= 2, "{c:?}");
    assert!(
        c.bytes_punched >= 2 * 4096,
        "the held segments gave space back: {c:?}"
    );
    // The state's bytes are gone from the held segments (whole blocks of them read as
    // zeros); the parts are all there.
    let held: Vec<_> = segments_on_disk(&fs)
        .into_iter()
        .map(|n| Path::new(DIR).join(n))
        .filter(|p| find(&fs, p, &part(0)).is_some())
        .collect();
    assert_eq!(held.len(), 1);
    assert!(
        find(&fs, &held[0], &filler(0)[..4096]).is_none(),
        "a whole block of state is left in a held segment"
    );
    for i in 0..16 {
        assert_eq!(blocks.get(&key(i)).unwrap(), Some(part(i)), "part {i}");
        assert_eq!(
            state.get(format!("state/{i:04}").as_bytes()).unwrap(),
            Some(filler(i))
        );
    }
    drop((blocks, state));
    drop(engine);
    let engine = open(&fs);
    let blocks = engine.keyspace("blocks").unwrap();
    for i in 0..16 {
        assert_eq!(
            blocks.get(&key(i)).unwrap(),
            Some(part(i)),
            "part {i} after reopen"
        );
    }
}

#[test]
fn usage_counts_each_keyspace_and_the_segments_held_for_values() {
    let fs = SimFs::new();
    let engine = open(&fs);
    let db = separating(&engine);
    let other = engine.keyspace("state").expect("keyspace");
    write_parts(&*db, 0..24);
    let mut b = Batch::new();
    b.put(
        Bytes::from_static(b"height"),
        Bytes::from(vec![7u8; PART_BYTES]),
    );
    other.write(&b, Durability::Synced).expect("write");
    delete_parts(&*db, 0..4);
    engine.checkpoint().unwrap();
    let u = engine.usage().unwrap();
    // Expected from what was written, not from the engine: parts 4..24 stay, each a
    // 9-byte key and a part kept in the journal, beside 24 small values inline.
    let (parts, metas) = (20u64, 24u64);
    let blocks = u.keyspaces["blocks"];
    assert_eq!(blocks.entries, parts + metas, "{u:?}");
    assert_eq!(
        blocks.logical_bytes,
        parts * (9 + PART_BYTES as u64) + metas * (9 + 1),
        "{u:?}"
    );
    assert_eq!(blocks.values_in_journal, parts, "{u:?}");
    assert_eq!(blocks.values_in_journal_bytes, parts * PART_BYTES as u64);
    // The index holds pointers: far less than the parts.
    assert!(
        blocks.index_bytes > 0 && blocks.index_bytes < parts * PART_BYTES as u64 / 4,
        "{u:?}"
    );
    // The other keyspace keeps its (large) value in the index.
    let state = u.keyspaces["state"];
    assert_eq!(
        (state.entries, state.logical_bytes, state.values_in_journal),
        (1, 6 + PART_BYTES as u64, 0),
        "{u:?}"
    );
    assert!(state.index_bytes >= PART_BYTES as u64, "{u:?}");
    // Segments below the checkpoint are held for the parts; the active one is not.
    assert!(
        u.held_segment_bytes > 0 && u.other_segment_bytes > 0,
        "{u:?}"
    );
    assert!(u.index_file_bytes > 0, "{u:?}");
    assert_eq!(
        u.index_file_bytes + u.held_segment_bytes + u.other_segment_bytes,
        engine.disk_size_bytes().unwrap(),
        "usage's files are the journal's files"
    );
    // Everything deleted: nothing held, no entries.
    delete_parts(&*db, 4..24);
    let mut b = Batch::new();
    for i in 0..24 {
        b.delete(Bytes::from(format!("meta/{i:04}")));
    }
    db.write(&b, Durability::Synced).expect("delete");
    engine.checkpoint().unwrap();
    let u = engine.usage().unwrap();
    assert_eq!(u.keyspaces["blocks"].entries, 0, "{u:?}");
    assert_eq!(u.held_segment_bytes, 0, "{u:?}");
}
