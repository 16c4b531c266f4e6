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

mod checks;

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

mod model;

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
