//! Every `Db` backend honours the same contract: point reads, range iteration in both
//! directions under every kind of bound, prefix ranges, batches where a later op on the same
//! key wins, empty ranges, snapshot iterators — checked by one suite run against `MemoryDb`,
//! `RedbDb` and a keyspace of a `JournalEngine` (`JournalDb`), and by a model test comparing
//! random op sequences with a `BTreeMap`.
//!
//! The journal runs in three settings:
//! * `journal_sim`: on `SimFs`, the applier inline, with segments, checkpoints and the overlay
//!   budget shrunk to a few KiB, so rolls, checkpoints, trims and budget waits happen inside
//!   every case; a decoy keyspace holds the same keys with other values, so a write or a read
//!   leaking across keyspaces diverges from the model;
//! * `journal_disk`: on a real directory with the background applier and the default sizes;
//! * `journal_disk_small`: a real directory, the background applier and tiny sizes;
//! * `journal_separating`: `journal_sim` with the keyspace keeping values of 64 bytes or
//!   more in the journal (ADR 0013): the model's large values are read through pointers;
//! * `journal_runs`: `journal_sim` with the keyspace indexed by sorted runs (ADR 0014) and a
//!   run's blocks closed every few bytes, so each apply step writes a run of many blocks
//!   and reads merge many runs, the newest winning and its tombstones hiding older ones;
//! * `journal_runs_disk_small`: `journal_disk_small` with the keyspace indexed by runs.
//! * `journal_runs_separating`: `journal_runs` with the runs pointing at values of 64 bytes
//!   or more in the journal (ADR 0016): large values read through pointers kept in runs,
//!   merged and shadowed.
//!
//! The expected answers are computed here from a `BTreeMap` with this file's own bound logic,
//! never with the crate's `KeyRange::contains`, so a wrong bound in the crate cannot agree
//! with itself.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::fs::{FileSystem, StdFs};
use flushpoint::journal::{
    Applier, JournalEngine, JournalOptions, KeyspaceOptions, SEPARATE_VALUES_MIN_BYTES,
};
use flushpoint::testing::SimFs;
use flushpoint::{
    Batch, Db, DbWrapper, Direction, Durability, KeyRange, MemoryDb, RedbDb, RedbOptions,
};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

/// redb's page cache in these tests. Why this bound: small enough that the model test's
/// values overflow it now and then, so reads also come from the file, not only the cache.
const TEST_CACHE_BYTES: usize = 4 * 1024 * 1024;

/// Segment bytes in the small settings. Why this bound: a model case writes a few KiB to
/// 100 KiB, so segments roll many times per case.
const SMALL_SEGMENT_BYTES: u64 = 2 * 1024;
/// Checkpoint bytes in the small settings. Why: several checkpoints (and trims) per case.
const SMALL_CHECKPOINT_BYTES: u64 = 1024;
/// Overlay budget in the small settings. Why: a value of 20–40 KB passes it, so writers
/// wait for (or run) the applier inside a case.
const SMALL_OVERLAY_BYTES: u64 = 8 * 1024;

/// The keyspace under test, and the decoy beside it.
const KEYSPACE: &str = "conformance";
const DECOY: &str = "decoy";

fn small(applier: Applier) -> JournalOptions {
    JournalOptions::default()
        .with_segment_bytes(SMALL_SEGMENT_BYTES)
        .with_checkpoint_bytes(SMALL_CHECKPOINT_BYTES)
        .with_overlay_bytes_max(SMALL_OVERLAY_BYTES)
        // The background applier applies each unit at once: reads race its commits.
        .with_apply_batch_delay(std::time::Duration::ZERO)
        .with_applier(applier)
        // With the background applier every synced unit is applied while it is synced:
        // reads race that step and its commit too.
        .with_apply_while_syncing_bytes_min(0)
}

/// Body bytes of a run's block in the runs fixtures. Why: a case writes tens of small
/// pairs, so a block of ~16 bytes closes after one or two ops and a run has many blocks:
/// the block index's search and the cursors' moves between blocks are exercised.
const RUN_BLOCK_BYTES_SMALL: usize = 16;

/// A database under test, reopenable when it lives on disk.
struct Fixture {
    db: Option<Box<dyn Db>>,
    /// Opens the database again on the same files (`None`: in memory, reopen is a no-op).
    open: Option<Box<dyn Fn() -> Box<dyn Db>>>,
    _dir: Option<tempfile::TempDir>,
}

/// Opens the engine and the keyspace under test; on first open fills the decoy keyspace
/// with the model's keys (one synced multi-keyspace commit).
fn open_keyspace(
    fs: Arc<dyn FileSystem>,
    dir: &Path,
    options: JournalOptions,
    keyspace: KeyspaceOptions,
) -> Box<dyn Db> {
    let engine = JournalEngine::open(fs, dir, options).expect("open journal");
    let decoy = engine.keyspace(DECOY).expect("decoy keyspace");
    if decoy.get(b"").expect("decoy get").is_none() {
        let mut batch = Batch::new();
        for k in [
            &b""[..],
            b"\x00",
            b"\x01",
            b"a",
            b"\xfe",
            b"\xff",
            b"aa",
            b"\x00\xff",
        ] {
            batch.put(b(k), b(b"decoy value"));
        }
        engine
            .commit(&[(DECOY, &batch)], Durability::Synced)
            .expect("decoy commit");
    }
    Box::new(engine.keyspace_with(KEYSPACE, keyspace).expect("keyspace"))
}

impl Fixture {
    fn memory() -> Self {
        Fixture {
            db: Some(Box::new(MemoryDb::new("conformance"))),
            open: None,
            _dir: None,
        }
    }

    fn reopenable(
        open: impl Fn() -> Box<dyn Db> + 'static,
        dir: Option<tempfile::TempDir>,
    ) -> Self {
        Fixture {
            db: Some(open()),
            open: Some(Box::new(open)),
            _dir: dir,
        }
    }

    fn redb() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db.redb");
        let options = RedbOptions::default().with_cache_bytes(TEST_CACHE_BYTES);
        Self::reopenable(
            move || Box::new(RedbDb::open(&path, "conformance", &options).expect("open redb")),
            Some(dir),
        )
    }

    fn journal(
        fs: Arc<dyn FileSystem>,
        dir: std::path::PathBuf,
        options: JournalOptions,
        tmp: Option<tempfile::TempDir>,
    ) -> Self {
        Self::journal_with(fs, dir, options, KeyspaceOptions::default(), tmp)
    }

    fn journal_with(
        fs: Arc<dyn FileSystem>,
        dir: std::path::PathBuf,
        options: JournalOptions,
        keyspace: KeyspaceOptions,
        tmp: Option<tempfile::TempDir>,
    ) -> Self {
        Self::reopenable(
            move || open_keyspace(fs.clone(), &dir, options.clone(), keyspace),
            tmp,
        )
    }

    /// `journal_sim` with the keyspace separating (ADR 0013): values of
    /// `SEPARATE_VALUES_MIN_BYTES` or more are read through pointers into the segments,
    /// which trims keep while pointed at.
    fn journal_separating() -> Self {
        Self::journal_with(
            Arc::new(SimFs::new()),
            "/j".into(),
            small(Applier::Inline),
            KeyspaceOptions::separating_values_from(SEPARATE_VALUES_MIN_BYTES),
            None,
        )
    }

    /// `journal_sim` with the keyspace indexed by runs (ADR 0014), blocks of ~16 bytes.
    fn journal_runs() -> Self {
        Self::journal_runs_sim(KeyspaceOptions::indexed_by_runs())
    }

    /// `journal_runs` whose runs point at values of `SEPARATE_VALUES_MIN_BYTES` or more in
    /// the journal (ADR 0016).
    fn journal_runs_separating() -> Self {
        Self::journal_runs_sim(
            KeyspaceOptions::indexed_by_runs()
                .with_values_separated_from(SEPARATE_VALUES_MIN_BYTES),
        )
    }

    /// A runs keyspace with `keyspace`'s options on `SimFs`, blocks of ~16 bytes.
    fn journal_runs_sim(keyspace: KeyspaceOptions) -> Self {
        Self::journal_with(
            Arc::new(SimFs::new()),
            "/j".into(),
            small(Applier::Inline).with_run_block_bytes(RUN_BLOCK_BYTES_SMALL),
            keyspace,
            None,
        )
    }

    fn journal_runs_disk_small() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("journal");
        Self::journal_with(
            Arc::new(StdFs),
            dir,
            small(Applier::Background).with_run_block_bytes(RUN_BLOCK_BYTES_SMALL),
            KeyspaceOptions::indexed_by_runs(),
            Some(tmp),
        )
    }

    fn journal_sim() -> Self {
        Self::journal(
            Arc::new(SimFs::new()),
            "/j".into(),
            small(Applier::Inline),
            None,
        )
    }

    fn journal_disk() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("journal");
        Self::journal(Arc::new(StdFs), dir, JournalOptions::default(), Some(tmp))
    }

    fn journal_disk_small() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("journal");
        Self::journal(Arc::new(StdFs), dir, small(Applier::Background), Some(tmp))
    }

    fn db(&self) -> &dyn Db {
        self.db.as_deref().expect("fixture holds a database")
    }

    /// Closes and reopens an on-disk database (a clean restart); a no-op in memory.
    fn reopen(&mut self) {
        let Some(open) = &self.open else { return };
        // The old handle must be closed (a journal's applier stopped) before the files are
        // opened again.
        self.db = None;
        self.db = Some(open());
    }
}

fn b(x: &[u8]) -> Bytes {
    Bytes::copy_from_slice(x)
}

fn put_all(db: &dyn Db, pairs: &[(&[u8], &[u8])]) {
    let mut batch = Batch::new();
    for (k, v) in pairs {
        batch.put(b(k), b(v));
    }
    db.write(&batch, Durability::Synced).expect("write");
}

fn in_bounds(key: &[u8], start: &Bound<Bytes>, end: &Bound<Bytes>) -> bool {
    let above = match start {
        Bound::Included(s) => key >= &s[..],
        Bound::Excluded(s) => key > &s[..],
        Bound::Unbounded => true,
    };
    let below = match end {
        Bound::Included(e) => key <= &e[..],
        Bound::Excluded(e) => key < &e[..],
        Bound::Unbounded => true,
    };
    above && below
}

/// What a range must return, from the model.
fn expected_range(
    model: &BTreeMap<Bytes, Bytes>,
    start: &Bound<Bytes>,
    end: &Bound<Bytes>,
    direction: Direction,
) -> Vec<(Bytes, Bytes)> {
    let mut v: Vec<_> = model
        .iter()
        .filter(|(k, _)| in_bounds(k, start, end))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if direction == Direction::Reverse {
        v.reverse();
    }
    v
}

fn show(entries: &[(Bytes, Bytes)]) -> Vec<String> {
    entries
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                flushpoint::codec::hex(k),
                flushpoint::codec::hex(v)
            )
        })
        .collect()
}

mod checks {
    use super::*;

    pub fn get_and_contains(f: &mut Fixture) {
        let db = f.db();
        assert_eq!(db.get(b"a").unwrap(), None);
        assert!(!db.contains(b"a").unwrap());
        put_all(db, &[(b"a", b"1"), (b"ab", b"2"), (b"empty", b"")]);
        assert_eq!(db.get(b"a").unwrap(), Some(b(b"1")));
        assert!(db.contains(b"a").unwrap());
        // A key that is a prefix of another is a distinct key.
        assert_eq!(db.get(b"ab").unwrap(), Some(b(b"2")));
        assert_eq!(db.get(b"abc").unwrap(), None);
        assert!(!db.contains(b"abc").unwrap());
        // An empty value is a value, not an absence.
        assert_eq!(db.get(b"empty").unwrap(), Some(Bytes::new()));
        assert!(db.contains(b"empty").unwrap());
        // Overwrite, then delete.
        put_all(db, &[(b"a", b"3")]);
        assert_eq!(db.get(b"a").unwrap(), Some(b(b"3")));
        let mut batch = Batch::new();
        batch.delete(b(b"a"));
        db.write(&batch, Durability::Synced).unwrap();
        assert_eq!(db.get(b"a").unwrap(), None);
        assert!(!db.contains(b"a").unwrap());
        // Deleting an absent key is fine.
        db.write(&batch, Durability::Buffered).unwrap();
        // A large value round-trips byte for byte.
        let big: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
        put_all(db, &[(b"big", &big)]);
        assert_eq!(db.get(b"big").unwrap().as_deref(), Some(&big[..]));
    }

    /// Keys chosen around the edges: empty key, 0x00, shared prefixes, 0xff runs.
    const STORED: [&[u8]; 9] = [
        b"",
        b"\x00",
        b"a",
        b"ab",
        b"abc",
        b"b",
        b"\xfe\xff",
        b"\xff",
        b"\xff\xff",
    ];
    /// Bound keys: every stored key plus keys between and beyond them.
    const PROBES: [&[u8]; 8] = [
        b"\x00\x00",
        b"aa",
        b"abd",
        b"c",
        b"\xfe",
        b"\xff\x00",
        b"\xff\xff\xff",
        b"\x01",
    ];

    fn bounds() -> Vec<Bound<Bytes>> {
        let mut v = vec![Bound::Unbounded];
        for k in STORED.iter().chain(PROBES.iter()) {
            v.push(Bound::Included(b(k)));
            v.push(Bound::Excluded(b(k)));
        }
        v
    }

    /// Exhaustive over the small domain: every (start, end) pair of bounds, both directions.
    pub fn range_bounds(f: &mut Fixture) {
        let db = f.db();
        let model: BTreeMap<Bytes, Bytes> = STORED
            .iter()
            .enumerate()
            .map(|(i, k)| (b(k), Bytes::from(vec![i as u8; i + 1])))
            .collect();
        let mut batch = Batch::new();
        for (k, v) in &model {
            batch.put(k.clone(), v.clone());
        }
        db.write(&batch, Durability::Synced).unwrap();
        let bounds = bounds();
        let mut checked = 0;
        let mut non_empty = 0;
        for start in &bounds {
            for end in &bounds {
                for direction in [Direction::Forward, Direction::Reverse] {
                    let range = KeyRange {
                        start: start.clone(),
                        end: end.clone(),
                    };
                    let got = collect_range(db, range, direction).unwrap();
                    let want = expected_range(&model, start, end, direction);
                    assert_eq!(
                        show(&got),
                        show(&want),
                        "range {start:?}..{end:?} {direction:?}"
                    );
                    checked += 1;
                    non_empty += usize::from(!want.is_empty());
                }
            }
        }
        // The domain covers empty and non-empty answers alike.
        assert_eq!(checked, bounds.len() * bounds.len() * 2);
        assert!(
            non_empty > checked / 4 && non_empty < checked,
            "{non_empty}/{checked}"
        );
    }

    pub fn prefix_ranges(f: &mut Fixture) {
        let db = f.db();
        let stored: [&[u8]; 12] = [
            b"\x00",
            b"\x01",
            b"\x01\x00",
            b"\x01\x05\x07",
            b"\x01\xff",
            b"\x01\xff\xff",
            b"\x02",
            b"\x02\x00",
            b"\xfe\xff\x01",
            b"\xff",
            b"\xff\xff",
            b"\xff\xff\x00",
        ];
        let pairs: Vec<(&[u8], &[u8])> = stored.iter().map(|k| (*k, &b"v"[..])).collect();
        put_all(db, &pairs);
        let prefixes: [&[u8]; 10] = [
            b"",
            b"\x00",
            b"\x01",
            b"\x01\x00",
            b"\x01\xff",
            b"\x01\xff\xff",
            b"\x03",
            b"\xfe",
            b"\xff",
            b"\xff\xff",
        ];
        for prefix in prefixes {
            let mut want: Vec<Bytes> = stored
                .iter()
                .filter(|k| k.starts_with(prefix))
                .map(|k| b(k))
                .collect();
            let got: Vec<Bytes> = collect_range(db, KeyRange::prefix(prefix), Direction::Forward)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(
                got,
                want,
                "prefix {} forward",
                flushpoint::codec::hex(prefix)
            );
            want.reverse();
            let got: Vec<Bytes> = collect_range(db, KeyRange::prefix(prefix), Direction::Reverse)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            assert_eq!(
                got,
                want,
                "prefix {} reverse",
                flushpoint::codec::hex(prefix)
            );
        }
    }

    pub fn batch_last_op_wins(f: &mut Fixture) {
        let db = f.db();
        put_all(db, &[(b"c", b"old"), (b"d", b"old")]);
        let mut batch = Batch::new();
        batch
            // put, delete, put: the last put wins
            .put(b(b"a"), b(b"1"))
            .delete(b(b"a"))
            .put(b(b"a"), b(b"2"))
            // put then delete: absent
            .put(b(b"b"), b(b"1"))
            .delete(b(b"b"))
            // delete an existing key then put it back: present with the new value
            .delete(b(b"c"))
            .put(b(b"c"), b(b"new"))
            // put twice over an existing key: the second value
            .put(b(b"d"), b(b"x"))
            .put(b(b"d"), b(b"y"));
        assert_eq!(batch.len(), 9);
        db.write(&batch, Durability::Synced).unwrap();
        assert_eq!(db.get(b"a").unwrap(), Some(b(b"2")));
        assert_eq!(db.get(b"b").unwrap(), None);
        assert_eq!(db.get(b"c").unwrap(), Some(b(b"new")));
        assert_eq!(db.get(b"d").unwrap(), Some(b(b"y")));
        let all = collect_range(db, KeyRange::all(), Direction::Forward).unwrap();
        assert_eq!(
            show(&all),
            show(&[(b(b"a"), b(b"2")), (b(b"c"), b(b"new")), (b(b"d"), b(b"y"))])
        );
        // An empty batch is accepted and changes nothing.
        db.write(&Batch::new(), Durability::Synced).unwrap();
        db.write(&Batch::new(), Durability::Buffered).unwrap();
        assert_eq!(
            collect_range(db, KeyRange::all(), Direction::Forward)
                .unwrap()
                .len(),
            3
        );
    }

    pub fn empty_ranges(f: &mut Fixture) {
        let db = f.db();
        // An empty database has nothing in any range.
        for direction in [Direction::Forward, Direction::Reverse] {
            assert!(
                collect_range(db, KeyRange::all(), direction)
                    .unwrap()
                    .is_empty()
            );
            assert!(
                collect_range(db, KeyRange::prefix(b"x"), direction)
                    .unwrap()
                    .is_empty()
            );
        }
        put_all(db, &[(b"a", b"1"), (b"m", b"2"), (b"z", b"3")]);
        let m = || b(b"m");
        let empties = [
            // start == end with an excluded side: empty, even though "m" is stored
            (Bound::Included(m()), Bound::Excluded(m())),
            (Bound::Excluded(m()), Bound::Included(m())),
            (Bound::Excluded(m()), Bound::Excluded(m())),
            // start above end: empty, never a panic
            (Bound::Included(b(b"z")), Bound::Included(b(b"a"))),
            (Bound::Excluded(b(b"z")), Bound::Excluded(b(b"a"))),
            (Bound::Included(b(b"n")), Bound::Excluded(b(b"b"))),
            // a range between stored keys
            (Bound::Excluded(b(b"a")), Bound::Excluded(m())),
            (Bound::Included(b(b"b")), Bound::Included(b(b"l"))),
            // beyond either end
            (Bound::Excluded(b(b"z")), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded(b(b"a"))),
        ];
        for (start, end) in empties {
            for direction in [Direction::Forward, Direction::Reverse] {
                let got = collect_range(
                    db,
                    KeyRange {
                        start: start.clone(),
                        end: end.clone(),
                    },
                    direction,
                )
                .unwrap();
                assert!(got.is_empty(), "{start:?}..{end:?} {direction:?}: {got:?}");
            }
        }
        // The single-key range holds exactly that key: the empties above are not vacuous.
        let one = collect_range(
            db,
            KeyRange {
                start: Bound::Included(m()),
                end: Bound::Included(m()),
            },
            Direction::Reverse,
        )
        .unwrap();
        assert_eq!(show(&one), show(&[(m(), b(b"2"))]));
    }

    pub fn iterator_is_a_snapshot(f: &mut Fixture) {
        let db = f.db();
        put_all(db, &[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]);
        for direction in [Direction::Forward, Direction::Reverse] {
            let it = db.range(KeyRange::all(), direction).unwrap();
            // Writes after the iterator was created do not show through it.
            let mut batch = Batch::new();
            batch.delete(b(b"b")).put(b(b"d"), b(b"4"));
            db.write(&batch, Durability::Synced).unwrap();
            let got: Vec<_> = it.collect::<Result<_, _>>().unwrap();
            let mut want = vec![(b(b"a"), b(b"1")), (b(b"b"), b(b"2")), (b(b"c"), b(b"3"))];
            if direction == Direction::Reverse {
                want.reverse();
            }
            assert_eq!(show(&got), show(&want), "{direction:?}");
            // Undo for the next direction.
            let mut batch = Batch::new();
            batch.put(b(b"b"), b(b"2")).delete(b(b"d"));
            db.write(&batch, Durability::Synced).unwrap();
        }
    }

    pub fn both_durabilities_are_visible_at_once(f: &mut Fixture) {
        let db = f.db();
        let mut batch = Batch::new();
        for i in 0u32..300 {
            batch.put(
                Bytes::from(i.to_be_bytes().to_vec()),
                Bytes::from(vec![1u8; 100]),
            );
        }
        db.write(&batch, Durability::Buffered).unwrap();
        assert_eq!(
            collect_range(db, KeyRange::all(), Direction::Forward)
                .unwrap()
                .len(),
            300
        );
        let mut batch = Batch::new();
        for i in 0u32..300 {
            if i % 2 == 0 {
                batch.delete(Bytes::from(i.to_be_bytes().to_vec()));
            }
        }
        db.write(&batch, Durability::Synced).unwrap();
        let keys: Vec<u32> = collect_range(db, KeyRange::all(), Direction::Reverse)
            .unwrap()
            .into_iter()
            .map(|(k, _)| u32::from_be_bytes(k[..].try_into().unwrap()))
            .collect();
        let want: Vec<u32> = (0u32..300).rev().filter(|i| i % 2 == 1).collect();
        assert_eq!(keys, want);
    }

    pub fn writes_survive_reopen(f: &mut Fixture) {
        put_all(f.db(), &[(b"synced", b"1")]);
        let mut batch = Batch::new();
        batch.put(b(b"buffered"), b(b"2"));
        f.db().write(&batch, Durability::Buffered).unwrap();
        f.reopen();
        assert_eq!(f.db().get(b"synced").unwrap(), Some(b(b"1")));
        // A clean close keeps buffered writes too (only a power cut may lose them).
        assert_eq!(f.db().get(b"buffered").unwrap(), Some(b(b"2")));
    }
}

macro_rules! conformance {
    ($backend:ident, $fixture:expr) => {
        mod $backend {
            use super::*;

            #[test]
            fn get_returns_last_value_and_contains_agrees() {
                checks::get_and_contains(&mut $fixture);
            }
            #[test]
            fn range_matches_model_for_every_bound_pair_both_directions() {
                checks::range_bounds(&mut $fixture);
            }
            #[test]
            fn prefix_range_holds_exactly_the_prefixed_keys() {
                checks::prefix_ranges(&mut $fixture);
            }
            #[test]
            fn batch_later_op_on_same_key_wins() {
                checks::batch_last_op_wins(&mut $fixture);
            }
            #[test]
            fn empty_and_inverted_ranges_yield_nothing() {
                checks::empty_ranges(&mut $fixture);
            }
            #[test]
            fn range_iterator_is_a_snapshot() {
                checks::iterator_is_a_snapshot(&mut $fixture);
            }
            #[test]
            fn synced_and_buffered_writes_are_visible_at_once() {
                checks::both_durabilities_are_visible_at_once(&mut $fixture);
            }
            #[test]
            fn writes_survive_clean_reopen() {
                checks::writes_survive_reopen(&mut $fixture);
            }
            #[test]
            fn random_ops_match_btreemap_model() {
                model::check_quickcheck(|| $fixture, model_cases(stringify!($backend)));
            }
        }
    };
}

/// Cases per model run. Why: redb (and a journal on a real directory) creates a file per
/// case (7 fsyncs, plus a directory fsync) and syncs some writes; on a loaded 2-core machine
/// an fsync can take ~10 ms, so the disk backends get fewer cases to keep the file well
/// under 20 s; `SimFs` and memory cost no fsync.
fn model_cases(backend: &str) -> u64 {
    if matches!(
        backend,
        "memory"
            | "journal_sim"
            | "journal_separating"
            | "journal_runs"
            | "journal_runs_separating"
    ) {
        500
    } else {
        60
    }
}

conformance!(memory, Fixture::memory());
conformance!(redb, Fixture::redb());
conformance!(journal_sim, Fixture::journal_sim());
conformance!(journal_disk, Fixture::journal_disk());
conformance!(journal_disk_small, Fixture::journal_disk_small());
conformance!(journal_separating, Fixture::journal_separating());
conformance!(journal_runs, Fixture::journal_runs());
conformance!(journal_runs_disk_small, Fixture::journal_runs_disk_small());
conformance!(journal_runs_separating, Fixture::journal_runs_separating());

mod model {
    use super::*;

    /// Longest op sequence per case.
    const OPS_MAX: u64 = 40;
    /// Env var that replays one seed of the seeded model test (the project's one seed
    /// variable).
    const SEED_ENV: &str = "FLUSHPOINT_SEED";
    /// The seed of a run without `FLUSHPOINT_SEED`.
    const SEED_DEFAULT: u64 = 0x00f1_5400;

    #[derive(Debug, Clone)]
    pub enum ModelOp {
        Put(Vec<u8>, Vec<u8>, bool),
        Delete(Vec<u8>, bool),
        /// (key, Some(value) = put, None = delete), synced?
        Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool),
        Get(Vec<u8>),
        Range(Bound<Vec<u8>>, Bound<Vec<u8>>, bool),
        Prefix(Vec<u8>, bool),
        Reopen,
    }

    /// A random-choice source: `pick(n)` is in `0..n`.
    type Pick<'a> = &'a mut dyn FnMut(u64) -> u64;

    /// Keys from a small alphabet with edge bytes, so ops collide and bounds hit keys.
    fn key(pick: Pick<'_>) -> Vec<u8> {
        const ALPHABET: [u8; 5] = [0x00, 0x01, 0x61, 0xfe, 0xff];
        let len = pick(4) as usize;
        (0..len).map(|_| ALPHABET[pick(5) as usize]).collect()
    }

    fn value(pick: Pick<'_>) -> Vec<u8> {
        // Mostly small; sometimes a value spanning several redb pages.
        let len = match pick(10) {
            0 => 20_000 + pick(20_000) as usize,
            1 => 0,
            // Around a separating keyspace's threshold (64 bytes): both sides of it.
            2 => 60 + pick(8) as usize,
            _ => pick(64) as usize,
        };
        let fill = pick(256) as u8;
        (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
    }

    fn bound(pick: Pick<'_>) -> Bound<Vec<u8>> {
        match pick(3) {
            0 => Bound::Unbounded,
            1 => Bound::Included(key(pick)),
            _ => Bound::Excluded(key(pick)),
        }
    }

    pub fn op(pick: Pick<'_>) -> ModelOp {
        match pick(20) {
            0..=5 => ModelOp::Put(key(pick), value(pick), pick(SYNCED_ONE_IN) == 0),
            6..=7 => ModelOp::Delete(key(pick), pick(SYNCED_ONE_IN) == 0),
            8..=10 => {
                let n = pick(6) as usize;
                let items = (0..n)
                    .map(|_| {
                        let k = key(pick);
                        let v = if pick(3) == 0 {
                            None
                        } else {
                            Some(value(pick))
                        };
                        (k, v)
                    })
                    .collect();
                ModelOp::Batch(items, pick(SYNCED_ONE_IN) == 0)
            }
            11..=13 => ModelOp::Get(key(pick)),
            14..=16 => ModelOp::Range(bound(pick), bound(pick), pick(2) == 0),
            17..=18 => ModelOp::Prefix(key(pick), pick(2) == 0),
            _ => ModelOp::Reopen,
        }
    }

    impl Arbitrary for ModelOp {
        fn arbitrary(g: &mut Gen) -> Self {
            op(&mut |n| u64::arbitrary(g) % n)
        }
    }

    /// Stored keys a `get_many` check reads beside the key it asks for. Why: enough for
    /// hits and misses in one call, few enough to keep a case cheap.
    const GET_MANY_STORED_KEYS: usize = 4;

    /// One write in `SYNCED_ONE_IN` is `Synced`. Why: both paths must match the model, but
    /// every synced write costs an fsync.
    const SYNCED_ONE_IN: u64 = 8;

    fn durability(synced: bool) -> Durability {
        if synced {
            Durability::Synced
        } else {
            Durability::Buffered
        }
    }

    fn to_bytes(bound: &Bound<Vec<u8>>) -> Bound<Bytes> {
        match bound {
            Bound::Included(k) => Bound::Included(b(k)),
            Bound::Excluded(k) => Bound::Excluded(b(k)),
            Bound::Unbounded => Bound::Unbounded,
        }
    }

    /// Runs `ops` on the fixture and on a `BTreeMap`; the first divergence is the error.
    pub fn run(f: &mut Fixture, ops: &[ModelOp]) -> Result<(), String> {
        let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            let fail = |what: String| Err(format!("op {i} {op:?}: {what}"));
            match op {
                ModelOp::Put(k, v, synced) => {
                    let mut batch = Batch::new();
                    batch.put(b(k), b(v));
                    if let Err(e) = f.db().write(&batch, durability(*synced)) {
                        return fail(e.to_string());
                    }
                    model.insert(b(k), b(v));
                }
                ModelOp::Delete(k, synced) => {
                    let mut batch = Batch::new();
                    batch.delete(b(k));
                    if let Err(e) = f.db().write(&batch, durability(*synced)) {
                        return fail(e.to_string());
                    }
                    model.remove(&b(k)[..]);
                }
                ModelOp::Batch(items, synced) => {
                    let mut batch = Batch::new();
                    for (k, v) in items {
                        match v {
                            Some(v) => {
                                batch.put(b(k), b(v));
                                model.insert(b(k), b(v));
                            }
                            None => {
                                batch.delete(b(k));
                                model.remove(&k[..]);
                            }
                        }
                    }
                    // A batch of distinct keys and even length goes through write_entries
                    // (a flush point's path); the rest through write.
                    let keys: std::collections::BTreeSet<&Vec<u8>> =
                        items.iter().map(|(k, _)| k).collect();
                    let written = if keys.len() == items.len() && items.len() % 2 == 0 {
                        let owned: Vec<(Bytes, Option<Bytes>)> = items
                            .iter()
                            .map(|(k, v)| (b(k), v.as_deref().map(b)))
                            .collect();
                        let mut entries = owned.iter().map(|(k, v)| (k, v.as_ref()));
                        f.db().write_entries(&mut entries, durability(*synced))
                    } else {
                        f.db().write(&batch, durability(*synced))
                    };
                    if let Err(e) = written {
                        return fail(e.to_string());
                    }
                }
                ModelOp::Get(k) => {
                    let got = f.db().get(k).map_err(|e| e.to_string())?;
                    let want = model.get(&k[..]).cloned();
                    if got != want {
                        return fail(format!("get: db {got:?}, model {want:?}"));
                    }
                    let has = f.db().contains(k).map_err(|e| e.to_string())?;
                    if has != want.is_some() {
                        return fail(format!("contains: db {has}, model {}", want.is_some()));
                    }
                    // get_many over this key and a few stored ones, in one snapshot.
                    let mut keys: Vec<&[u8]> = vec![k];
                    keys.extend(model.keys().take(GET_MANY_STORED_KEYS).map(|k| k.as_ref()));
                    let got = f.db().get_many(&keys).map_err(|e| e.to_string())?;
                    let want: Vec<Option<Bytes>> =
                        keys.iter().map(|k| model.get(*k).cloned()).collect();
                    if got != want {
                        return fail(format!("get_many: db {got:?}, model {want:?}"));
                    }
                }
                ModelOp::Range(start, end, reverse) => {
                    let (start, end) = (to_bytes(start), to_bytes(end));
                    let direction = if *reverse {
                        Direction::Reverse
                    } else {
                        Direction::Forward
                    };
                    let range = KeyRange {
                        start: start.clone(),
                        end: end.clone(),
                    };
                    let got = collect_range(f.db(), range, direction).map_err(|e| e.to_string())?;
                    let want = expected_range(&model, &start, &end, direction);
                    if got != want {
                        return fail(format!(
                            "range: db {:?}, model {:?}",
                            show(&got),
                            show(&want)
                        ));
                    }
                }
                ModelOp::Prefix(p, reverse) => {
                    let direction = if *reverse {
                        Direction::Reverse
                    } else {
                        Direction::Forward
                    };
                    let got = collect_range(f.db(), KeyRange::prefix(p), direction)
                        .map_err(|e| e.to_string())?;
                    let mut want: Vec<_> = model
                        .iter()
                        .filter(|(k, _)| k.starts_with(p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    if *reverse {
                        want.reverse();
                    }
                    if got != want {
                        return fail(format!(
                            "prefix: db {:?}, model {:?}",
                            show(&got),
                            show(&want)
                        ));
                    }
                }
                ModelOp::Reopen => f.reopen(),
            }
        }
        // Finally the whole database equals the model, after one more reopen.
        f.reopen();
        let all = collect_range(f.db(), KeyRange::all(), Direction::Forward)
            .map_err(|e| e.to_string())?;
        let want: Vec<_> = model.into_iter().collect();
        if all != want {
            return Err(format!(
                "final contents: db {:?}, model {:?}",
                show(&all),
                show(&want)
            ));
        }
        Ok(())
    }

    thread_local! {
        /// The fixture maker for the quickcheck property running on this thread (quickcheck
        /// takes a plain `fn`, which cannot capture it).
        static MAKE: std::cell::Cell<Option<fn() -> Fixture>> = const { std::cell::Cell::new(None) };
    }

    fn prop(ops: Vec<ModelOp>) -> TestResult {
        let make = MAKE.with(|m| m.get()).expect("fixture maker set");
        let mut f = make();
        match run(&mut f, &ops) {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(e),
        }
    }

    /// quickcheck explores op sequences and shrinks a failure to a short one, which it
    /// prints. The generator is seeded: the seed is printed first, and
    /// `FLUSHPOINT_SEED=<seed>` replays the run (shrinking included).
    pub fn check_quickcheck(make: fn() -> Fixture, cases: u64) {
        // A fixed default, never the clock: a plain run is reproducible.
        let seed = seed();
        eprintln!("model seed {seed} (replay: {SEED_ENV}={seed})");
        MAKE.with(|m| m.set(Some(make)));
        QuickCheck::new()
            .tests(cases)
            .max_tests(cases)
            .rng(Gen::from_size_and_seed(OPS_MAX as usize, seed))
            .quickcheck(prop as fn(Vec<ModelOp>) -> TestResult);
    }

    /// One wrong answer a `Db` could give.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Lie {
        /// `get` returns the value with one extra byte.
        WrongValue,
        /// `contains` says no for a key that is there.
        ContainsMissesKey,
        /// A range drops its last entry.
        RangeDropsKey,
        /// A range comes back in the other direction.
        RangeWrongDirection,
        /// A batch applies its ops in reverse (an earlier op on a key wins).
        BatchFirstOpWins,
        /// A delete is ignored.
        DeleteIgnored,
        /// `get_many` loses the first value it found (reads it as absent).
        GetManyDropsValue,
        /// `write_entries` drops its last entry.
        EntriesDropLast,
    }

    /// Every lie.
    pub const LIES: [Lie; 8] = [
        Lie::WrongValue,
        Lie::ContainsMissesKey,
        Lie::RangeDropsKey,
        Lie::RangeWrongDirection,
        Lie::BatchFirstOpWins,
        Lie::DeleteIgnored,
        Lie::GetManyDropsValue,
        Lie::EntriesDropLast,
    ];

    /// A `MemoryDb` that tells one lie.
    #[derive(Debug)]
    pub struct Lying {
        pub inner: MemoryDb,
        pub lie: Lie,
    }

    impl DbWrapper for Lying {
        type Inner = MemoryDb;
        fn inner(this: &Self) -> &MemoryDb {
            &this.inner
        }
        fn get(this: &Self, key: &[u8]) -> flushpoint::Result<Option<Bytes>> {
            let v = this.inner.get(key)?;
            Ok(match (this.lie, v) {
                (Lie::WrongValue, Some(v)) => Some([&v[..], &[0u8][..]].concat().into()),
                (_, v) => v,
            })
        }
        fn contains(this: &Self, key: &[u8]) -> flushpoint::Result<bool> {
            Ok(this.lie != Lie::ContainsMissesKey && this.inner.contains(key)?)
        }
        fn write_entries<'a>(
            this: &Self,
            entries: &mut dyn Iterator<Item = flushpoint::EntryRef<'a>>,
            durability: Durability,
        ) -> flushpoint::Result<()> {
            let mut all: Vec<_> = entries.collect();
            if this.lie == Lie::EntriesDropLast {
                all.pop();
            }
            this.inner.write_entries(&mut all.into_iter(), durability)
        }
        fn get_many(this: &Self, keys: &[&[u8]]) -> flushpoint::Result<Vec<Option<Bytes>>> {
            let mut v = this.inner.get_many(keys)?;
            if this.lie == Lie::GetManyDropsValue
                && let Some(first) = v.iter_mut().find(|x| x.is_some())
            {
                *first = None;
            }
            Ok(v)
        }
        fn range(
            this: &Self,
            range: KeyRange,
            direction: Direction,
        ) -> flushpoint::Result<flushpoint::DbIter<'_>> {
            let mut v = collect_range(&this.inner, range, direction)?;
            match this.lie {
                Lie::RangeDropsKey => {
                    v.pop();
                }
                Lie::RangeWrongDirection => v.reverse(),
                _ => {}
            }
            Ok(Box::new(v.into_iter().map(Ok)))
        }
        fn write(this: &Self, batch: &Batch, durability: Durability) -> flushpoint::Result<()> {
            let mut ops: Vec<flushpoint::Op> = batch.ops().to_vec();
            match this.lie {
                Lie::BatchFirstOpWins => ops.reverse(),
                Lie::DeleteIgnored => ops.retain(|op| matches!(op, flushpoint::Op::Put(..))),
                _ => {}
            }
            let mut b = Batch::new();
            for op in ops {
                match op {
                    flushpoint::Op::Put(k, v) => b.put(k, v),
                    flushpoint::Op::Delete(k) => b.delete(k),
                };
            }
            this.inner.write(&b, durability)
        }
    }

    /// Searches seeded random op sequences for one on which `run` rejects `lie`; returns
    /// the case number and the checker's message.
    pub fn find_lie(lie: Lie, seed: u64, cases: u64) -> Option<(u64, String)> {
        let mut g = Gen::from_size_and_seed(OPS_MAX as usize, seed);
        (0..cases).find_map(|case| {
            let ops = Vec::<ModelOp>::arbitrary(&mut g);
            let mut f = Fixture {
                db: Some(Box::new(Lying {
                    inner: MemoryDb::new("liar"),
                    lie,
                })),
                open: None,
                _dir: None,
            };
            run(&mut f, &ops).err().map(|e| (case, e))
        })
    }

    /// The seed of a run (`FLUSHPOINT_SEED`, else the fixed default).
    pub fn seed() -> u64 {
        match std::env::var(SEED_ENV) {
            Ok(s) => s
                .parse()
                .unwrap_or_else(|_| panic!("{SEED_ENV}={s:?} is not a u64")),
            Err(_) => SEED_DEFAULT,
        }
    }
}

/// The model checker rejects a `Db` that lies: each lie is found by the same seeded search.
#[test]
fn model_rejects_every_lying_db() {
    let seed = model::seed();
    println!("lie search: seed {seed} (replay with FLUSHPOINT_SEED={seed})");
    for lie in model::LIES {
        match model::find_lie(lie, seed, 500) {
            Some((case, e)) => {
                let e: String = e.chars().take(120).collect();
                println!("{lie:?}: rejected by random case {case}: {e}…");
            }
            None => panic!("500 random cases never caught {lie:?}"),
        }
    }
}
