//! The first failed write poisons the block store: the failed `save_block` returns `Err`,
//! the height does not advance, and every later call — saves, loads, prune, rollback —
//! returns `Error::Poisoned` without touching the database again (no write is retried as if
//! it had worked). Checked with a failing `Db` wrapper, and with a redb file whose
//! `sync_data` fails.

use crate::support;

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use flushpoint::records::FlushRecord;
use flushpoint::store::BlockStore;
use flushpoint::testing::{FailAfter, FailingDb};
use flushpoint::{Batch, Db, Durability, Error, MemoryDb, RedbDb, RedbOptions, Result};
use redb::{BackendError, StorageBackend, backends::InMemoryBackend};
use support::{Saved, chain};

/// What a failing write does to the database before it reports failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// Fails before writing: the batch is not applied.
    Lost,
    /// Applies the batch, then fails (a failed fsync after the data reached the file).
    Landed,
}

/// A `Db` that lets `ok_writes` writes through and then fails every write
/// ([`flushpoint::testing::FailingDb`], counting its failures and every write call).
fn failing<D: Db>(inner: D, ok_writes: u64, failure: Failure) -> Arc<FailingDb<D>> {
    let budget = FailAfter::new(ok_writes);
    Arc::new(match failure {
        Failure::Lost => FailingDb::new(inner, budget),
        Failure::Landed => FailingDb::landing(inner, budget),
    })
}

fn assert_poisoned<T: std::fmt::Debug>(what: &str, r: Result<T>) {
    match r {
        Err(Error::Poisoned { db, cause }) => {
            assert_eq!(db, "block store", "{what}: names the database");
            assert!(
                cause.message.contains("injected"),
                "{what}: names the first failure ({cause})"
            );
            assert_eq!(
                cause.kind,
                flushpoint::ErrorKind::Io,
                "{what}: keeps its kind"
            );
        }
        other => panic!("{what}: expected Poisoned, got {other:?}"),
    }
}

/// Every public call of a poisoned store reports the poison.
fn assert_every_call_poisoned(store: &BlockStore<flushpoint::demo::Block>, blocks: &[Saved]) {
    let stored = &blocks[0];
    let next = &blocks[2];
    let later = &blocks[3];
    assert!(store.is_poisoned());
    assert_poisoned("save_block of the failed block", next.save(store));
    assert_poisoned("save_block of a later block", later.save(store));
    assert_poisoned("load_block_meta", store.load_block_meta(1));
    assert_poisoned("load_block_part", store.load_block_part(1, 0));
    assert_poisoned("load_block", store.load_block(1));
    assert_poisoned("load_block_commit", store.load_block_commit(1));
    assert_poisoned("load_seen_commit", store.load_seen_commit(1));
    assert_poisoned("height_by_hash", store.height_by_hash(&stored.hash()));
    assert_poisoned(
        "load_block_meta_by_hash",
        store.load_block_meta_by_hash(&stored.hash()),
    );
    assert_poisoned(
        "load_block_by_hash",
        store.load_block_by_hash(&stored.hash()),
    );
    assert_poisoned("load_flush_record", store.load_flush_record());
    assert_poisoned(
        "save_flush_record",
        store.save_flush_record(&FlushRecord { from: 1, to: 2 }),
    );
    assert_poisoned("prune", store.prune(2));
    assert_poisoned("rollback_to", store.rollback_to(1));
}

#[test]
fn failed_save_block_poisons_every_later_call() {
    for failure in [Failure::Lost, Failure::Landed] {
        let mem = Arc::new(MemoryDb::new("block store"));
        let db = failing(mem.clone(), 2, failure);
        let store = BlockStore::<flushpoint::demo::Block>::open(db.clone()).unwrap();
        let blocks = chain(1, 4, 3, 100, 11);
        blocks[0].save(&store).unwrap();
        blocks[1].save(&store).unwrap();
        assert!(!store.is_poisoned());

        let err = blocks[2].save(&store).unwrap_err();
        // The fault fired exactly once, and it is what the caller saw.
        assert_eq!(db.failures(), 1, "{failure:?}");
        assert!(
            matches!(&err, Error::Storage { message, .. } if message.starts_with("injected failure")),
            "{failure:?}: {err:?}"
        );
        assert_eq!(
            store.height(),
            2,
            "{failure:?}: height advanced on a failed write"
        );
        assert_eq!(store.base(), 1);

        let calls_after_failure = db.write_calls();
        assert_eq!(
            calls_after_failure, 3,
            "{failure:?}: two saves and the failed one counted"
        );
        assert_every_call_poisoned(&store, &blocks);
        // No later call reached the database's write path: nothing was retried.
        assert_eq!(db.write_calls(), calls_after_failure, "{failure:?}");
        assert_eq!(db.failures(), 1);

        // A restart (a new store over the same database) sees what the failed write left:
        // either outcome is possible after an Err, and both are consistent.
        let reopened = BlockStore::<flushpoint::demo::Block>::open(mem.clone()).unwrap();
        let want = match failure {
            Failure::Lost => 2,
            Failure::Landed => 3,
        };
        assert_eq!(reopened.height(), want, "{failure:?}");
        assert!(reopened.load_block(want).unwrap().is_some());
    }
}

#[test]
fn failed_prune_and_rollback_poison_the_store() {
    type Op = fn(&BlockStore<flushpoint::demo::Block>) -> Result<u64>;
    let ops: [(&str, Op); 2] = [
        ("prune", |s: &BlockStore<flushpoint::demo::Block>| {
            s.prune(3)
        }),
        ("rollback_to", |s: &BlockStore<flushpoint::demo::Block>| {
            s.rollback_to(2)
        }),
    ];
    for (what, op) in ops {
        let db = failing(MemoryDb::new("block store"), 4, Failure::Lost);
        let store = BlockStore::<flushpoint::demo::Block>::open(db.clone()).unwrap();
        let blocks = chain(1, 4, 2, 50, 5);
        for b in &blocks {
            b.save(&store).unwrap();
        }
        assert!(op(&store).is_err(), "{what} succeeded past the failure");
        assert_eq!(db.failures(), 1, "{what}: the fault fired once");
        assert_eq!(
            (store.base(), store.height()),
            (1, 4),
            "{what}: the range moved on a failed write"
        );
        assert_poisoned(what, op(&store));
        assert_poisoned("save_block after it", chain(5, 1, 1, 10, 1)[0].save(&store));
        assert_poisoned("load_block after it", store.load_block(4));
        assert_eq!(db.failures(), 1, "{what}: a write was retried");
    }
}

/// A redb backend whose `sync_data` fails once armed, counting the failures.
#[derive(Debug)]
struct FailingSync {
    inner: InMemoryBackend,
    armed: Arc<AtomicBool>,
    failed_syncs: Arc<AtomicU64>,
}

type IoResult<T> = std::result::Result<T, std::io::Error>;

impl StorageBackend for FailingSync {
    fn len(&self) -> IoResult<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> IoResult<()> {
        if self.armed.load(Ordering::SeqCst) {
            self.failed_syncs.fetch_add(1, Ordering::SeqCst);
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.inner.write(offset, data)
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(s, e)
    }
}

#[test]
fn failed_redb_fdatasync_poisons_store_and_database() {
    let armed = Arc::new(AtomicBool::new(false));
    let failed_syncs = Arc::new(AtomicU64::new(0));
    let backend = FailingSync {
        inner: InMemoryBackend::new(),
        armed: armed.clone(),
        failed_syncs: failed_syncs.clone(),
    };
    let redb =
        Arc::new(RedbDb::with_backend("block store", backend, &RedbOptions::default()).unwrap());
    let store = BlockStore::<flushpoint::demo::Block>::open(redb.clone()).unwrap();
    let blocks = chain(1, 4, 3, 100, 13);
    blocks[0].save(&store).unwrap();
    blocks[1].save(&store).unwrap();

    armed.store(true, Ordering::SeqCst);
    let err = blocks[2].save(&store).unwrap_err();
    assert!(
        failed_syncs.load(Ordering::SeqCst) >= 1,
        "the fsync fault never fired"
    );
    assert!(matches!(err, Error::Storage { .. }), "{err:?}");
    assert_eq!(store.height(), 2);
    // Even with the disk healthy again, nothing is accepted: the content is unknown.
    armed.store(false, Ordering::SeqCst);
    let syncs = failed_syncs.load(Ordering::SeqCst);
    assert_every_call_poisoned(&store, &blocks);
    // The database handle itself is poisoned too, for any other user of it.
    assert_poisoned("redb get", redb.get(b"\x06"));
    assert_poisoned("redb write", redb.write(&Batch::new(), Durability::Synced));
    assert_eq!(
        failed_syncs.load(Ordering::SeqCst),
        syncs,
        "a sync was retried"
    );
}
