//! `save_block` issues exactly one synced write — one synced batch at the `Db` layer and, on
//! redb, one `sync_data` (fdatasync) on the file — for a light 1-part block and for a
//! 40-part block alike.
//!
//! redb also fdatasyncs when it grows the file (`set_len` then `sync_data`, so a crash cannot
//! leave a header describing a file longer than the one on disk). That sync belongs to the
//! growth, not to the commit. These tests log every backend call in order, attribute each
//! `sync_data` that directly follows a growing `set_len` to that growth, and require exactly
//! one sync left over: the commit. They also grow the file ahead of the measured saves so
//! that, in the common case, no growth happens at all and the raw `sync_data` count is 1.
//! Run with `--nocapture` to see the measured counts.

use crate::support;

use std::fs::OpenOptions;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use flushpoint::db::{CountingDb, SyncCounters};
use flushpoint::store::BlockStore;
use flushpoint::{Batch, Db, Durability, MemoryDb, RedbDb, RedbOptions};
use redb::{BackendError, StorageBackend, backends::FileBackend};
use support::{Saved, block_at, forty_part_txs, light_block};

/// Parts in the heavy block. Why 40: well past redb's single-page values (each 64 KiB part
/// takes its own 128 KiB page), so a save that committed per part would show it.
const HEAVY_PARTS: u32 = 40;

/// Size of the value written and deleted to grow the file before measuring. Why: larger
/// than every measured save together (3 light + 2 × 40 × 128 KiB pages ≈ 10 MiB), so the
/// saves can be served from pages the file already has.
const BALLAST_BYTES: usize = 32 * 1024 * 1024;

/// One call on the storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    SetLen { from: u64, to: u64 },
    Sync,
}

/// A backend that logs `set_len` and `sync_data` calls in order.
#[derive(Debug)]
struct CallLog<B> {
    inner: B,
    calls: Arc<Mutex<Vec<Call>>>,
}

type IoResult<T> = std::result::Result<T, std::io::Error>;

impl<B: StorageBackend> StorageBackend for CallLog<B> {
    fn len(&self) -> IoResult<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        let from = self.inner.len()?;
        self.calls
            .lock()
            .unwrap()
            .push(Call::SetLen { from, to: len });
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> IoResult<()> {
        self.calls.lock().unwrap().push(Call::Sync);
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.inner.write(offset, data)
    }
    fn close(&self) -> IoResult<()> {
        self.inner.close()
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

/// The syncs of a call sequence, split into growth syncs and the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SyncSplit {
    growths: u64,
    growth_syncs: u64,
    other_syncs: u64,
    shrinks: u64,
}

/// A `sync_data` right after a growing `set_len` is that growth's sync; every other
/// `sync_data` is a commit's (or a header's) sync.
fn split(calls: &[Call]) -> SyncSplit {
    let mut s = SyncSplit {
        growths: 0,
        growth_syncs: 0,
        other_syncs: 0,
        shrinks: 0,
    };
    let mut after_growth = false;
    for c in calls {
        match *c {
            Call::SetLen { from, to } if to > from => {
                s.growths += 1;
                after_growth = true;
            }
            Call::SetLen { .. } => {
                s.shrinks += 1;
                after_growth = false;
            }
            Call::Sync if after_growth => {
                s.growth_syncs += 1;
                after_growth = false;
            }
            Call::Sync => s.other_syncs += 1,
        }
    }
    s
}

#[test]
fn call_log_attributes_growth_syncs() {
    // Exhaustive over every call sequence up to 6 long: each sync is counted exactly once,
    // as a growth sync exactly when the call before it grew the file.
    let alphabet = [
        Call::SetLen { from: 1, to: 2 },
        Call::SetLen { from: 2, to: 1 },
        Call::Sync,
    ];
    let mut sequences: Vec<Vec<Call>> = vec![vec![]];
    let mut checked = 0;
    for _ in 0..6 {
        let mut longer = Vec::new();
        for seq in &sequences {
            for c in alphabet {
                let mut s = seq.clone();
                s.push(c);
                longer.push(s);
            }
        }
        for seq in &longer {
            let grows = |c: &Call| matches!(c, Call::SetLen { from, to } if to > from);
            let want_growth_syncs = seq
                .windows(2)
                .filter(|w| grows(&w[0]) && w[1] == Call::Sync)
                .count() as u64;
            let syncs = seq.iter().filter(|c| **c == Call::Sync).count() as u64;
            let got = split(seq);
            assert_eq!(got.growth_syncs, want_growth_syncs, "{seq:?}");
            assert_eq!(got.growth_syncs + got.other_syncs, syncs, "{seq:?}");
            assert_eq!(got.growths, seq.iter().filter(|c| grows(c)).count() as u64);
            assert_eq!(got.growths + got.shrinks + syncs, seq.len() as u64);
            checked += 1;
        }
        sequences = longer;
    }
    assert_eq!(checked, 3 + 9 + 27 + 81 + 243 + 729);
}

/// The blocks each test saves: a first light block, two more light ones, then two 40-part
/// blocks, heights 1..=5.
fn blocks() -> Vec<Saved> {
    let mut out = Vec::new();
    let mut prev = [0; 32];
    for h in 1..=3 {
        let s = light_block(h, prev, h);
        prev = s.hash();
        out.push(s);
    }
    for h in 4..=5 {
        let s = block_at(h, prev, forty_part_txs(h));
        assert_eq!(s.parts.total(), HEAVY_PARTS, "the heavy block has 40 parts");
        prev = s.hash();
        out.push(s);
    }
    out
}

fn kind(s: &Saved) -> &'static str {
    if s.parts.total() == 1 {
        "1-part"
    } else {
        "40-part"
    }
}

/// Saves each block and checks the `Db`-level counts: one synced batch, nothing buffered,
/// nothing failed, and the bytes of exactly one batch holding the block's parts.
fn save_counted(store: &BlockStore<flushpoint::demo::Block>, counters: &SyncCounters, s: &Saved) {
    let before = counters.snapshot();
    s.save(store).expect("save_block");
    let d = counters.snapshot() - before;
    eprintln!(
        "height {} ({}, {} bytes): synced batches {}, buffered batches {}, bytes {}",
        s.height(),
        kind(s),
        s.parts.byte_size(),
        d.synced_batches,
        d.buffered_batches,
        d.bytes_written
    );
    assert_eq!(d.synced_batches, 1, "save_block writes one synced batch");
    assert_eq!(d.buffered_batches, 0, "save_block writes nothing buffered");
    assert_eq!(d.failed_batches, 0);
    assert!(
        d.bytes_written >= s.parts.byte_size(),
        "the one batch carries every part"
    );
    assert_eq!(store.height(), s.height());
}

#[test]
fn save_block_syncs_exactly_once_memory() {
    let counting = CountingDb::new(MemoryDb::new("block store"));
    let counters = counting.counters();
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap();
    for s in blocks() {
        save_counted(&store, &counters, &s);
    }
    let total = counters.snapshot();
    assert_eq!(total.synced_batches, 5);
    assert_eq!(total.buffered_batches, 0);
}

/// Opens a redb file under a call log; returns the db and the log.
fn open_logged(path: &std::path::Path) -> (Arc<RedbDb>, Arc<Mutex<Vec<Call>>>) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let backend = CallLog {
        inner: FileBackend::new(file).unwrap(),
        calls: calls.clone(),
    };
    let db = RedbDb::with_backend("block store", backend, &RedbOptions::default()).unwrap();
    (Arc::new(db), calls)
}

/// Saves every block of [`blocks`], checking each save's syncs; returns how many saves grew
/// the file.
fn save_all_measured(
    store: &BlockStore<flushpoint::demo::Block>,
    counters: &SyncCounters,
    redb: &RedbDb,
    calls: &Mutex<Vec<Call>>,
) -> u64 {
    let mut grown_saves = 0;
    for s in blocks() {
        let from = calls.lock().unwrap().len();
        let before = redb.backend_counts();
        save_counted(store, counters, &s);
        let d = redb.backend_counts() - before;
        let sp = split(&calls.lock().unwrap()[from..]);
        eprintln!(
            "height {} ({}): sync_data {}, set_len {}, bytes written {}; \
             growths {}, growth syncs {}, shrinks {}, commit syncs {}",
            s.height(),
            kind(&s),
            d.sync_data_calls,
            d.set_len_calls,
            d.bytes_written,
            sp.growths,
            sp.growth_syncs,
            sp.shrinks,
            sp.other_syncs
        );
        // The commit's own sync: exactly one.
        assert_eq!(sp.other_syncs, 1, "save_block commits with one fdatasync");
        // The raw counter agrees with the log: every sync is the commit's or a growth's.
        assert_eq!(d.sync_data_calls, 1 + sp.growth_syncs);
        assert_eq!(d.set_len_calls, sp.growths + sp.shrinks);
        assert!(
            d.bytes_written >= s.parts.byte_size(),
            "the commit wrote the block's bytes"
        );
        grown_saves += u64::from(sp.growths > 0);
    }
    grown_saves
}

#[test]
fn save_block_syncs_exactly_once_redb() {
    let dir = tempfile::tempdir().unwrap();
    let (redb, calls) = open_logged(&dir.path().join("blockstore.redb"));
    let counting = CountingDb::new(redb.clone());
    let counters = counting.counters();
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap();

    // Grow the file first: write a big value, then delete it. The growth must be seen here,
    // or the log could not tell growth syncs apart at all.
    let setup_from = calls.lock().unwrap().len();
    let mut batch = Batch::new();
    batch.put(
        Bytes::from_static(b"\xf0ballast"),
        Bytes::from(vec![7u8; BALLAST_BYTES]),
    );
    redb.write(&batch, Durability::Synced).unwrap();
    let mut batch = Batch::new();
    batch.delete(Bytes::from_static(b"\xf0ballast"));
    redb.write(&batch, Durability::Synced).unwrap();
    let setup = split(&calls.lock().unwrap()[setup_from..]);
    eprintln!("setup (ballast write + delete): {setup:?}");
    assert!(
        setup.growths >= 1 && setup.growth_syncs == setup.growths,
        "the ballast grew the file, each growth with its own sync: {setup:?}"
    );
    assert_eq!(setup.other_syncs, 2, "two synced commits, one sync each");

    let grown_saves = save_all_measured(&store, &counters, &redb, &calls);
    // The ballast made room for every measured save: each one cost exactly one sync_data.
    assert_eq!(
        grown_saves, 0,
        "a measured save grew the file despite the ballast"
    );
}

#[test]
fn save_block_syncs_exactly_once_redb_with_growth_counted_apart() {
    // A fresh file: the 40-part saves must grow it, and each growth's sync is told apart
    // from the one commit sync.
    let dir = tempfile::tempdir().unwrap();
    let (redb, calls) = open_logged(&dir.path().join("blockstore.redb"));
    let counting = CountingDb::new(redb.clone());
    let counters = counting.counters();
    let store = BlockStore::<flushpoint::demo::Block>::open(Arc::new(counting)).unwrap();
    let grown_saves = save_all_measured(&store, &counters, &redb, &calls);
    assert!(
        grown_saves >= 1,
        "no save grew a fresh file: growth went unobserved"
    );
}
