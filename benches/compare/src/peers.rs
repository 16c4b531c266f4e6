//! The peers, on blocks of flushpoint's shape: fjall, redb used directly, RocksDB (cargo
//! feature `rocksdb`), and the disk's own limit (raw append of the same bytes).
//!
//! Layouts: one database with three tables / keyspaces / column families (`blocks`,
//! `state`, `app`); each block is one atomic batch over the three (one redb write
//! transaction, one fjall `WriteBatch`, one RocksDB `WriteBatch`).
//!
//! Sync counting (no strace): redb through a counting `StorageBackend` around its own
//! `FileBackend` (every `sync_data` redb makes, file growth included); fjall: the syncs the
//! harness asks for (one `SyncAll` batch per block, one final `persist`; fjall's own
//! background syncs are not seen); RocksDB: its statistics ticker `rocksdb.wal.synced`;
//! raw rows: the `fdatasync` calls the harness makes, which are all of them.
//!
//! Invariant: every run checks its outcome after closing: the database reopened holds the
//! last block's sequential records with the bytes written (raw: the file holds exactly the
//! logical bytes).

use std::fs::File;
use std::io::Write;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redb::ReadableDatabase;

use crate::shape::{KeyKind, PeerOp, Shape, Store};

/// Flush window of the windowed rows (redb one commit per window, raw sequential write).
pub const WINDOW: Duration = Duration::from_secs(1);
/// Cache given to redb and fjall (perf-baseline.md used the same).
const CACHE_BYTES: usize = 1 << 30;

/// A peer contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// fjall, `PersistMode::SyncAll` on every block's batch.
    FjallSync,
    /// fjall, batches to OS buffers, one `persist(SyncAll)` at the end.
    FjallBuffered,
    /// redb, one `Durability::Immediate` transaction per block.
    RedbBlock,
    /// redb, one `Durability::Immediate` transaction per 1 s window.
    RedbWindow,
    /// RocksDB, `set_sync(true)` on every block's batch.
    RocksSync,
    /// RocksDB, no sync; `flush_wal(true)` at the end.
    RocksNoSync,
    /// Append the block's bytes to a file + `fdatasync` per block.
    RawSync,
    /// Append the block store's records of the block (what `save_block` writes) to a file +
    /// `fdatasync` per block: the limit `save_block` alone is compared with.
    RawSyncBlocks,
    /// Append the block's bytes; one `fdatasync` per 1 s and at the end.
    RawSeq,
}

/// What a peer run did.
#[derive(Debug, Default)]
pub struct PeerOut {
    /// Blocks written.
    pub blocks: u64,
    /// First block to files closed.
    pub elapsed: Duration,
    /// First block until every block written is durable (the last commit, `persist`,
    /// `flush_wal` or `fdatasync` returned), before the close.
    pub durable: Duration,
    /// Sync calls counted (see the module doc for how, per peer).
    pub syncs: u64,
    /// Each block's write-and-sync time, for the rows that sync every block (empty for the
    /// others).
    pub commits: CommitTimes,
}

/// Each block's commit time: from the start of its write to the return of the call that
/// made it durable. What a consensus block waits for; the row's blocks/s also counts the
/// work a row leaves for later (an applier's, a compaction's, the close).
#[derive(Debug, Default)]
pub struct CommitTimes(Vec<f64>);

impl CommitTimes {
    /// Times `commit` (one block's durable write) and keeps its time.
    pub fn time<T>(&mut self, commit: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = commit();
        self.0.push(t.elapsed().as_secs_f64() * 1e3);
        out
    }

    /// The median and the 99th percentile, in ms; `None` when nothing was timed.
    pub fn p50_p99_ms(&self) -> Option<(f64, f64)> {
        if self.0.is_empty() {
            return None;
        }
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some((at(0.5), at(0.99)))
    }
}

impl Peer {
    /// How this peer's syncs are counted.
    pub fn sync_method(self) -> &'static str {
        match self {
            Peer::FjallSync | Peer::FjallBuffered => "harness",
            Peer::RedbBlock | Peer::RedbWindow => "backend",
            Peer::RocksSync | Peer::RocksNoSync => "rocks-stats",
            Peer::RawSync | Peer::RawSyncBlocks | Peer::RawSeq => "harness",
        }
    }
}

/// Counts the `sync_data` calls redb makes on its file.
#[derive(Debug)]
struct CountingFile {
    inner: redb::backends::FileBackend,
    syncs: Arc<AtomicU64>,
}

type IoRes<T> = Result<T, std::io::Error>;

impl redb::StorageBackend for CountingFile {
    fn len(&self) -> IoRes<u64> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> IoRes<()> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> IoRes<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> IoRes<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoRes<()> {
        self.inner.write(offset, data)
    }
    fn close(&self) -> IoRes<()> {
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(
        &self,
        s: Bound<u64>,
        e: Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), redb::BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), redb::BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), redb::BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.inner.query_lock_range(s, e)
    }
}

const TABLES: [redb::TableDefinition<&[u8], &[u8]>; 3] = [
    redb::TableDefinition::new("blocks"),
    redb::TableDefinition::new("state"),
    redb::TableDefinition::new("app"),
];

fn s<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

fn open_redb(path: &Path, syncs: Arc<AtomicU64>) -> Result<redb::Database, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(s("open redb file"))?;
    let inner = redb::backends::FileBackend::new(file).map_err(s("redb backend"))?;
    redb::Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create_with_backend(CountingFile { inner, syncs })
        .map_err(s("redb create"))
}

fn redb_apply(txn: &redb::WriteTransaction, ops: &[PeerOp<'_>]) -> Result<(), String> {
    let mut t = [
        txn.open_table(TABLES[0]).map_err(s("open table"))?,
        txn.open_table(TABLES[1]).map_err(s("open table"))?,
        txn.open_table(TABLES[2]).map_err(s("open table"))?,
    ];
    for op in ops {
        let table = &mut t[op.store.index()];
        match op.value {
            Some(v) => {
                table.insert(op.key.as_slice(), v).map_err(s("insert"))?;
            }
            None => {
                table.remove(op.key.as_slice()).map_err(s("remove"))?;
            }
        }
    }
    Ok(())
}

fn begin(db: &redb::Database) -> Result<redb::WriteTransaction, String> {
    let mut txn = db.begin_write().map_err(s("begin write"))?;
    txn.set_durability(redb::Durability::Immediate)
        .map_err(s("durability"))?;
    Ok(txn)
}

/// Runs `peer` in `dir` (empty) until `stop(blocks, elapsed)`; `on_start` just before the
/// first block, `on_end` after the files are closed; then checks the outcome.
pub fn run_peer(
    peer: Peer,
    shape: &Shape,
    pool: &[u8],
    dir: &Path,
    stop: &dyn Fn(u64, Duration) -> bool,
    on_start: &mut dyn FnMut(),
    on_end: &mut dyn FnMut(),
) -> Result<PeerOut, String> {
    std::fs::create_dir_all(dir).map_err(s("create dir"))?;
    let out = match peer {
        Peer::RedbBlock | Peer::RedbWindow => {
            let syncs = Arc::new(AtomicU64::new(0));
            let path = dir.join("peer.redb");
            let db = open_redb(&path, syncs.clone())?;
            // Create the tables before the clock starts.
            let txn = begin(&db)?;
            redb_apply(&txn, &[])?;
            txn.commit().map_err(s("commit"))?;
            let s0 = syncs.load(Ordering::Relaxed);
            on_start();
            let start = Instant::now();
            let mut blocks = 0u64;
            let mut window: Option<(redb::WriteTransaction, Instant)> = None;
            let mut commits = CommitTimes::default();
            while !stop(blocks, start.elapsed()) {
                let ops = shape.peer_block(blocks + 1, pool);
                if peer == Peer::RedbBlock {
                    commits.time(|| -> Result<(), String> {
                        let txn = begin(&db)?;
                        redb_apply(&txn, &ops)?;
                        txn.commit().map_err(s("commit"))
                    })?;
                } else {
                    let (txn, opened) = match window.take() {
                        Some(w) => w,
                        None => (begin(&db)?, Instant::now()),
                    };
                    redb_apply(&txn, &ops)?;
                    if opened.elapsed() >= WINDOW {
                        txn.commit().map_err(s("commit"))?;
                    } else {
                        window = Some((txn, opened));
                    }
                }
                blocks += 1;
            }
            if let Some((txn, _)) = window {
                txn.commit().map_err(s("commit"))?;
            }
            let durable = start.elapsed();
            drop(db);
            let elapsed = start.elapsed();
            let n = syncs.load(Ordering::Relaxed) - s0;
            on_end();
            let db = open_redb(&path, Arc::new(AtomicU64::new(0)))?;
            let txn = db.begin_read().map_err(s("begin read"))?;
            let t = [
                txn.open_table(TABLES[0]).map_err(s("open table"))?,
                txn.open_table(TABLES[1]).map_err(s("open table"))?,
                txn.open_table(TABLES[2]).map_err(s("open table"))?,
            ];
            verify(shape, pool, blocks, |store, key| {
                Ok(t[store.index()]
                    .get(key)
                    .map_err(s("get"))?
                    .map(|v| v.value().to_vec()))
            })?;
            PeerOut {
                blocks,
                elapsed,
                durable,
                syncs: n,
                commits,
            }
        }
        Peer::FjallSync | Peer::FjallBuffered => {
            use fjall::{Database, KeyspaceCreateOptions, PersistMode};
            let path = dir.join("fjall");
            let open = || -> Result<(Database, Vec<fjall::Keyspace>), String> {
                let db = Database::builder(&path)
                    .cache_size(CACHE_BYTES as u64)
                    .open()
                    .map_err(s("fjall open"))?;
                let ks = Store::ALL
                    .iter()
                    .map(|st| {
                        db.keyspace(st.name(), KeyspaceCreateOptions::default)
                            .map_err(s("keyspace"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((db, ks))
            };
            let (db, ks) = open()?;
            on_start();
            let start = Instant::now();
            let mut blocks = 0u64;
            let mut n = 0u64;
            let mode = (peer == Peer::FjallSync).then_some(PersistMode::SyncAll);
            let mut commits = CommitTimes::default();
            while !stop(blocks, start.elapsed()) {
                let ops = shape.peer_block(blocks + 1, pool);
                let commit = || {
                    let mut b = db.batch().durability(mode);
                    for op in &ops {
                        let k = &ks[op.store.index()];
                        match op.value {
                            Some(v) => b.insert(k, op.key.as_slice(), v),
                            None => b.remove(k, op.key.as_slice()),
                        }
                    }
                    b.commit().map_err(s("fjall commit"))
                };
                if mode.is_some() {
                    commits.time(commit)?;
                } else {
                    commit()?;
                }
                n += u64::from(mode.is_some());
                blocks += 1;
            }
            db.persist(PersistMode::SyncAll).map_err(s("persist"))?;
            let durable = start.elapsed();
            n += 1;
            drop(ks);
            drop(db);
            let elapsed = start.elapsed();
            on_end();
            let (db, ks) = open()?;
            verify(shape, pool, blocks, |store, key| {
                Ok(ks[store.index()]
                    .get(key)
                    .map_err(s("get"))?
                    .map(|v| v.to_vec()))
            })?;
            drop(ks);
            drop(db);
            PeerOut {
                blocks,
                elapsed,
                durable,
                syncs: n,
                commits,
            }
        }
        Peer::RocksSync | Peer::RocksNoSync => {
            rocks::run(peer, shape, pool, dir, stop, on_start, on_end)?
        }
        Peer::RawSync | Peer::RawSyncBlocks | Peer::RawSeq => {
            let stores: &[Store] = if peer == Peer::RawSyncBlocks {
                &[Store::Blocks]
            } else {
                &Store::ALL
            };
            let path = dir.join("raw.bin");
            let mut f = File::create(&path).map_err(s("create raw"))?;
            let mut buf = Vec::new();
            on_start();
            let start = Instant::now();
            let mut last_sync = start;
            let mut blocks = 0u64;
            let mut n = 0u64;
            let mut commits = CommitTimes::default();
            while !stop(blocks, start.elapsed()) {
                buf.clear();
                for op in shape.peer_block(blocks + 1, pool) {
                    if stores.contains(&op.store) {
                        buf.extend_from_slice(&op.key);
                        buf.extend_from_slice(op.value.unwrap_or(&[]));
                    }
                }
                if peer != Peer::RawSeq {
                    commits.time(|| -> Result<(), String> {
                        f.write_all(&buf).map_err(s("write"))?;
                        f.sync_data().map_err(s("fdatasync"))
                    })?;
                    n += 1;
                } else {
                    f.write_all(&buf).map_err(s("write"))?;
                    if last_sync.elapsed() >= WINDOW {
                        f.sync_data().map_err(s("fdatasync"))?;
                        n += 1;
                        last_sync = Instant::now();
                    }
                }
                blocks += 1;
            }
            f.sync_data().map_err(s("fdatasync"))?;
            let durable = start.elapsed();
            n += 1;
            drop(f);
            let elapsed = start.elapsed();
            on_end();
            let len = std::fs::metadata(&path).map_err(s("stat"))?.len();
            crate::check::check(
                "raw: file length = logical bytes",
                &crate::check::Outcome::Heights(vec![len]),
                &crate::check::Outcome::Heights(vec![shape.logical_bytes_in(stores, blocks)]),
            )
            .map_err(|e| e.to_string())?;
            PeerOut {
                blocks,
                elapsed,
                durable,
                syncs: n,
                commits,
            }
        }
    };
    Ok(out)
}

/// Checks that the last block's sequential records read back with the bytes written.
pub(crate) fn verify(
    shape: &Shape,
    pool: &[u8],
    blocks: u64,
    mut get: impl FnMut(Store, &[u8]) -> Result<Option<Vec<u8>>, String>,
) -> Result<(), String> {
    if blocks == 0 {
        return Err("no blocks written".into());
    }
    let sample = shape.sample(blocks);
    let mut checked = 0;
    for (op, o) in shape.peer_block(blocks, pool).iter().zip(sample) {
        if o.kind != KeyKind::Seq {
            continue;
        }
        let got = get(op.store, &op.key)?;
        let want = op.value.map(<[u8]>::to_vec);
        crate::check::check(
            "peer: last block's record",
            &got.map_or(crate::check::Outcome::Missing, crate::check::Outcome::Value),
            &want.map_or(crate::check::Outcome::Missing, crate::check::Outcome::Value),
        )
        .map_err(|e| e.to_string())?;
        checked += 1;
    }
    if checked == 0 {
        return Err("peer: the last block has no sequential record to check".into());
    }
    Ok(())
}

#[cfg(feature = "rocksdb")]
mod rocks {
    use super::*;

    fn wal_synced(opts: &rocksdb::Options) -> u64 {
        opts.get_statistics()
            .and_then(|st| {
                st.lines()
                    .find(|l| l.starts_with("rocksdb.wal.synced "))
                    .and_then(|l| l.split(':').nth(1))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    pub(super) fn run(
        peer: Peer,
        shape: &Shape,
        pool: &[u8],
        dir: &Path,
        stop: &dyn Fn(u64, Duration) -> bool,
        on_start: &mut dyn FnMut(),
        on_end: &mut dyn FnMut(),
    ) -> Result<PeerOut, String> {
        let path = dir.join("rocks");
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.enable_statistics();
        let names = Store::ALL.map(Store::name);
        let db = rocksdb::DB::open_cf(&opts, &path, names).map_err(s("rocks open"))?;
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(peer == Peer::RocksSync);
        let s0 = wal_synced(&opts);
        on_start();
        let start = Instant::now();
        let mut blocks = 0u64;
        let mut commits = CommitTimes::default();
        {
            let cfs: Vec<_> = names
                .iter()
                .map(|n| db.cf_handle(n).ok_or("no column family"))
                .collect::<Result<_, _>>()?;
            while !stop(blocks, start.elapsed()) {
                let mut b = rocksdb::WriteBatch::default();
                for op in shape.peer_block(blocks + 1, pool) {
                    let cf = cfs[op.store.index()];
                    match op.value {
                        Some(v) => b.put_cf(cf, &op.key, v),
                        None => b.delete_cf(cf, &op.key),
                    }
                }
                if peer == Peer::RocksSync {
                    commits
                        .time(|| db.write_opt(b, &wo))
                        .map_err(s("rocks write"))?;
                } else {
                    db.write_opt(b, &wo).map_err(s("rocks write"))?;
                }
                blocks += 1;
            }
            db.flush_wal(true).map_err(s("flush wal"))?;
        }
        let durable = start.elapsed();
        let n = wal_synced(&opts) - s0;
        drop(db);
        let elapsed = start.elapsed();
        on_end();
        let db = rocksdb::DB::open_cf(&opts, &path, names).map_err(s("rocks reopen"))?;
        verify(shape, pool, blocks, |store, key| {
            let cf = db.cf_handle(store.name()).ok_or("no column family")?;
            db.get_cf(cf, key).map_err(s("rocks get"))
        })?;
        Ok(PeerOut {
            blocks,
            elapsed,
            durable,
            syncs: n,
            commits,
        })
    }
}

#[cfg(not(feature = "rocksdb"))]
mod rocks {
    use super::*;

    pub(super) fn run(
        _: Peer,
        _: &Shape,
        _: &[u8],
        _: &Path,
        _: &dyn Fn(u64, Duration) -> bool,
        _: &mut dyn FnMut(),
        _: &mut dyn FnMut(),
    ) -> Result<PeerOut, String> {
        Err("built without the `rocksdb` feature".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_times_give_the_median_and_the_99th_percentile() {
        assert_eq!(CommitTimes::default().p50_p99_ms(), None);
        // 100 blocks of 1..=100 ms, shuffled: the median rank is 50 (0-based, rounded) and
        // the 99th percentile's is 98.
        let mut t = CommitTimes((1..=100).rev().map(f64::from).collect());
        t.0.swap(3, 70);
        assert_eq!(t.p50_p99_ms(), Some((51.0, 99.0)));
        let one = CommitTimes(vec![0.25]);
        assert_eq!(one.p50_p99_ms(), Some((0.25, 0.25)));
    }

    fn shape() -> Shape {
        let rec: Vec<Vec<crate::shape::RecordedOp>> = (1..=2u64)
            .map(|h| {
                vec![
                    (
                        Store::Blocks,
                        [&[1u8][..], &h.to_be_bytes()].concat(),
                        Some(64),
                    ),
                    (Store::App, vec![h as u8; 32], Some(16)),
                ]
            })
            .collect();
        Shape::from_recorded("light", &rec)
    }

    #[test]
    fn verify_accepts_the_bytes_written() {
        let (sh, pool) = (shape(), vec![3u8; 1024]);
        let last = sh.peer_block(5, &pool);
        verify(&sh, &pool, 5, |st, k| {
            Ok(last
                .iter()
                .find(|o| o.store == st && o.key == k)
                .and_then(|o| o.value.map(<[u8]>::to_vec)))
        })
        .unwrap();
    }

    #[test]
    fn verify_rejects_wrong_bytes_a_missing_record_and_no_blocks() {
        let (sh, pool) = (shape(), vec![3u8; 1024]);
        let wrong = verify(&sh, &pool, 5, |_, _| Ok(Some(vec![4u8; 64]))).unwrap_err();
        assert!(wrong.contains("last block"), "{wrong}");
        assert!(verify(&sh, &pool, 5, |_, _| Ok(None)).is_err());
        assert!(verify(&sh, &pool, 0, |_, _| Ok(Some(vec![]))).is_err());
    }
}
