//! The redb backend (the embedded default): one file per database, one table `kv`.
//!
//! Invariant: `Synced` is one `Durability::Immediate` commit (redb's 1-phase commit: one
//! `sync_data` on the file, plus one per step of file growth); `Buffered` is
//! `Durability::None`.
//! Invariant: a new file is created under a temporary name, synced, renamed into place, and
//! the parent directory fsynced — redb does not do it; without it a power cut can lose the
//! file's directory entry or leave a half-created file redb refuses to open.
//! Invariant: the first failed write or commit poisons the handle (redb latches I/O errors as
//! well); only a reopen, which runs redb's repair, clears it.
//! Invariant: every call into redb — the open, each transaction step, every `next` of a
//! range, the close and the drops of redb's handles — runs under the file's [`RedbGuard`]:
//! a redb panic (a damaged page) is [`Error::CorruptFile`] naming the file, and latches the
//! handle with its writes fenced.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use redb::{Database, ReadableDatabase, StorageBackend, TableDefinition, TableError};

use super::pair_crc::{check_neighbours, checked_value, insert_checked};
use super::redb_guard::{GuardedDrop, GuardedIter, RedbGuard};
use super::storage::{BackendCounters, BackendCounts, CountingBackend};
use super::{Batch, Db, DbIter, Direction, Durability, EntryRef, KeyRange, Op};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::{FileSystem, FsBackend, OpenMode, StdFs, parent_of};
use crate::poison::Poison;

type RedbItem = std::result::Result<
    (
        redb::AccessGuard<'static, &'static [u8]>,
        redb::AccessGuard<'static, &'static [u8]>,
    ),
    redb::StorageError,
>;

/// The table of a database created by this version: each value is stored followed by
/// its pair crc32 (`pair_crc.rs`: over the key's length, the key and the value), checked on
/// every read. redb verifies its page checksums only when it repairs a file or checks its
/// integrity, so without it a bit flipped inside a stored pair would read back flipped.
const TABLE_CHECKED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv.crc");
/// The table of a database created before pairs carried a checksum: values as given, opened
/// and written as they are (the file keeps the layout it was created with).
const TABLE_UNCHECKED: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// redb's page cache per database. Why this bound: three databases share the node's memory
/// with up to 3 × 64 MiB of held writes; redb's 1 GiB default would triple the footprint.
pub const REDB_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Options for opening a redb database: `RedbOptions::default()` and the `with_…` methods.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedbOptions {
    /// Page cache size in bytes.
    pub cache_bytes: usize,
}

impl Default for RedbOptions {
    fn default() -> Self {
        RedbOptions {
            cache_bytes: REDB_CACHE_BYTES,
        }
    }
}

impl RedbOptions {
    /// These options with [`RedbOptions::cache_bytes`] set.
    pub fn with_cache_bytes(self, cache_bytes: usize) -> Self {
        RedbOptions {
            cache_bytes,
            ..self
        }
    }
}

/// A database in one redb file.
pub struct RedbDb {
    name: String,
    path: Option<PathBuf>,
    fs: Option<Arc<dyn FileSystem>>,
    /// The file's boundary with redb; `db` is dropped under it.
    guard: Arc<RedbGuard>,
    db: GuardedDrop<Database>,
    counters: Arc<BackendCounters>,
    poison: Poison,
    /// Whether the file keeps its pairs in [`TABLE_CHECKED`] (each value with its crc32) or,
    /// created before that, in [`TABLE_UNCHECKED`]; decided at open from the file.
    checked: bool,
    /// Kept alive as long as this handle, and dropped after `db` (fields drop in order), so
    /// the file is closed before what it guards is released (a home's lock).
    keep_alive: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for RedbDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbDb")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

/// Fsyncs a directory, so entries created in it survive a power cut.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    StdFs.sync_dir(dir)
}

impl RedbDb {
    /// Opens (or creates) the database file at `path`.
    ///
    /// When the file is created, the table is created with one synced commit and the parent
    /// directory is fsynced before this returns `Ok`.
    pub fn open(path: &Path, name: &str, options: &RedbOptions) -> Result<Self> {
        Self::open_on(Arc::new(StdFs), path, name, options)
    }

    /// As [`RedbDb::open`], on the file system `fs`: every file operation, redb's page I/O
    /// included, goes through it.
    pub fn open_on(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        name: &str,
        options: &RedbOptions,
    ) -> Result<Self> {
        let exists = fs
            .exists(path)
            .map_err(|e| Error::io(name, "stat file", path, e))?;
        if !exists {
            Self::create_atomically(&*fs, path, name, options)?;
        }
        let mut db = Self::open_file(&*fs, path, name, options)?;
        db.path = Some(path.to_path_buf());
        db.fs = Some(fs);
        Ok(db)
    }

    fn open_file(
        fs: &dyn FileSystem,
        path: &Path,
        name: &str,
        options: &RedbOptions,
    ) -> Result<Self> {
        let file = fs
            .open_file(path, OpenMode::CreateOrOpen)
            .map_err(|e| Error::io(name, "open file", path, e))?;
        let backend = FsBackend::new(file).map_err(|e| Error::storage(name, "open", e))?;
        Self::with_backend_at(name, Some(path), backend, options)
    }

    /// Creates the database under a temporary name, makes it durable, then renames it into
    /// place and fsyncs the directory. A power cut during creation leaves no file, or a
    /// temporary one that the next open deletes — never a half-written file under the real
    /// name, which redb would refuse to open ("magic number mismatch").
    fn create_atomically(
        fs: &dyn FileSystem,
        path: &Path,
        name: &str,
        options: &RedbOptions,
    ) -> Result<()> {
        let io = |op: &'static str, p: &Path| {
            let p = p.to_path_buf();
            move |e: std::io::Error| Error::io(name, op, &p, e)
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".creating");
        let tmp = PathBuf::from(tmp);
        // The unlink need not be durable: a leftover that comes back is removed again.
        match fs.remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("remove leftover file", &tmp)(e)),
        }
        // The table's first commit is synced inside `with_backend`; closing may write more,
        // and a failed close (a write or sync of redb's) is an error: dropping would hide it
        // and the sync below would then report lost bytes durable (fsyncgate).
        Self::open_file(fs, &tmp, name, options)?.close()?;
        // The file is complete and durable before it gets its real name, whatever redb's
        // close does: without it a rename that survives a cut could name lost bytes (empty or
        // torn: "magic number mismatch"). redb 4.6 already syncs on close, so today this
        // sync finds nothing pending (`tests/crash/power_cut_files.rs` cannot tell it is missing).
        fs.open_file(&tmp, OpenMode::Existing)
            .and_then(|f| f.sync_all())
            .map_err(io("fsync new file", &tmp))?;
        // Order matters: the file is complete and durable before its real name exists, and
        // the name is durable (directory fsync) before the node writes anything into it.
        fs.rename(&tmp, path).map_err(io("rename new file", path))?;
        // Without this sync a power cut can lose the name, and with it every synced write the
        // node made into the file afterwards.
        let dir = parent_of(path);
        fs.sync_dir(dir).map_err(io("fsync directory", dir))
    }

    /// Opens a database over any redb backend (tests use simulated disks).
    pub fn with_backend(
        name: &str,
        backend: impl StorageBackend,
        options: &RedbOptions,
    ) -> Result<Self> {
        Self::with_backend_at(name, None, backend, options)
    }

    /// As [`RedbDb::with_backend`], for the file at `path` (named by a damaged file's error).
    fn with_backend_at(
        name: &str,
        path: Option<&Path>,
        backend: impl StorageBackend,
        options: &RedbOptions,
    ) -> Result<Self> {
        let guard = Arc::new(RedbGuard::new(name, path));
        // Crash: none added; after a caught panic redb's writes (its close) never reach the
        // file, which stays as the damage left it.
        let counting = CountingBackend::new(backend).fenced_by(guard.fence());
        let counters = counting.counters();
        // redb's open may repair the file (after an unclean close): it walks the trees.
        let db = guard.call("open", || {
            Database::builder()
                .set_cache_size(options.cache_bytes)
                .create_with_backend(counting)
                // redb's error stays the source: `DatabaseAlreadyOpen` makes the kind `Locked`.
                .map_err(|e| Error::storage(name, "open", e))
        })?;
        let mut this = RedbDb {
            name: name.to_string(),
            path: None,
            fs: None,
            db: GuardedDrop::new(guard.clone(), "close", db),
            guard,
            counters,
            poison: Poison::default(),
            checked: true,
            keep_alive: None,
        };
        this.checked = this.ensure_table()?;
        Ok(this)
    }

    /// Finds the file's table — [`TABLE_CHECKED`], or [`TABLE_UNCHECKED`] in a file created
    /// before pairs carried a checksum — or creates [`TABLE_CHECKED`] in a file that has
    /// neither (one commit). Returns whether the pairs are checked. Both tables in one file
    /// is a damaged file.
    fn ensure_table(&self) -> Result<bool> {
        self.guard.call("open table", || {
            let txn = self
                .db
                .begin_read()
                .map_err(|e| self.err("begin read", e))?;
            let exists = |table| match txn.open_table(table) {
                Ok(_) => Ok(true),
                Err(TableError::TableDoesNotExist(_)) => Ok(false),
                Err(e) => Err(self.err("open table", e)),
            };
            match (exists(TABLE_CHECKED)?, exists(TABLE_UNCHECKED)?) {
                (true, false) => Ok(true),
                (false, true) => Ok(false),
                (true, true) => Err(Error::Corrupt {
                    db: self.name.clone(),
                    key: Vec::new(),
                    height: None,
                    reason: CorruptReason::Invalid(
                        "the file holds both the checked and the unchecked table",
                    ),
                }),
                (false, false) => {
                    drop(txn);
                    let txn = self
                        .db
                        .begin_write()
                        .map_err(|e| self.fail("begin write", e))?;
                    txn.open_table(TABLE_CHECKED)
                        .map_err(|e| self.fail("create table", e))?;
                    txn.commit().map_err(|e| self.fail("commit", e))?;
                    Ok(true)
                }
            }
        })
    }

    /// The table this file keeps its pairs in.
    fn table(&self) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
        if self.checked {
            TABLE_CHECKED
        } else {
            TABLE_UNCHECKED
        }
    }

    /// Whether each pair is stored with its crc32 and checked on read (a file created by
    /// this version), or as given (a file created before).
    pub fn pairs_checked(&self) -> bool {
        self.checked
    }

    /// Closes the database, returning redb's close error (its last writes and syncs) where
    /// dropping the handle would ignore it. On `Err` the file's durable content is unknown:
    /// nothing may be synced on it as if the close had worked.
    pub fn close(self) -> Result<()> {
        let RedbDb {
            name,
            guard,
            db,
            keep_alive,
            ..
        } = self;
        // A latched guard runs nothing: `db` is then dropped with the closure, under it.
        let closed = guard.call("close", || {
            db.into_inner()
                .close()
                .map_err(|e| Error::storage(&name, "close", e))
        });
        // After the file is closed, as when dropped.
        drop(keep_alive);
        closed
    }

    /// Keeps `guard` alive until this handle is dropped, and releases it only after the
    /// file is closed (a home's lock rides on its databases this way).
    pub(crate) fn keep_alive(&mut self, guard: Arc<dyn std::any::Any + Send + Sync>) {
        self.keep_alive = Some(guard);
    }

    /// The real I/O calls made on the file so far.
    pub fn backend_counts(&self) -> BackendCounts {
        self.counters.snapshot()
    }

    /// The shared backend counters.
    pub fn backend_counters(&self) -> Arc<BackendCounters> {
        self.counters.clone()
    }

    /// The file's path, when opened from a path.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Runs redb's full integrity check (walks every page checksum).
    pub fn check_integrity(&mut self) -> Result<bool> {
        self.check_poison()?;
        self.guard.call("check integrity", || {
            self.db
                .check_integrity()
                .map_err(|e| Error::storage(&self.name, "check integrity", e))
        })
    }

    /// Refused once a redb panic was caught (`CorruptFile`) or a write failed (`Poisoned`).
    fn check_poison(&self) -> Result<()> {
        self.guard.check()?;
        self.poison.check(&self.name)
    }

    fn err(&self, op: &'static str, e: impl Into<crate::error::BoxError>) -> Error {
        Error::storage(&self.name, op, e)
    }

    /// Records a write-path failure: poisons the handle and returns the error.
    fn fail(&self, op: &'static str, e: impl Into<crate::error::BoxError>) -> Error {
        let err = Error::storage(&self.name, op, e);
        self.poison.set(&err);
        err
    }
}

impl RedbDb {
    /// One write transaction with `durability`: `apply` fills the table, then it commits.
    fn write_with(
        &self,
        durability: Durability,
        apply: impl FnOnce(&mut RedbTable<'_>) -> Result<()>,
    ) -> Result<()> {
        self.check_poison()?;
        let txn = self.guard.call("begin write", || {
            let mut txn = self
                .db
                .begin_write()
                .map_err(|e| self.fail("begin write", e))?;
            txn.set_durability(match durability {
                Durability::Synced => redb::Durability::Immediate,
                Durability::Buffered => redb::Durability::None,
            })
            .map_err(|e| self.fail("set durability", e))?;
            Ok(txn)
        })?;
        // Dropped without its commit (an error below): redb aborts it, under the guard.
        let txn = GuardedDrop::new(self.guard.clone(), "abort write", txn);
        {
            let table = self.guard.call("open table", || {
                txn.open_table(self.table())
                    .map_err(|e| self.fail("open table", e))
            })?;
            // The table's drop hands its root back to the transaction: redb code too.
            let mut table = GuardedDrop::new(self.guard.clone(), "close table", table);
            apply(&mut table)?;
        }
        // A failed commit leaves the batch's durability unknown: poison, never retry.
        // Crash: a panic inside the commit leaves the last completed commit (redb's header
        // swap is last), and the fence keeps redb from writing anything after it.
        self.guard.call("commit", || {
            txn.into_inner()
                .commit()
                .map_err(|e| self.fail("commit", e))
        })
    }

    /// The table in a new read transaction (a snapshot of the last commit); refused once
    /// poisoned.
    fn read_table(&self) -> Result<GuardedDrop<ReadTable>> {
        self.check_poison()?;
        let table = self.guard.call("open table", || {
            let txn = self
                .db
                .begin_read()
                .map_err(|e| self.err("begin read", e))?;
            txn.open_table(self.table())
                .map_err(|e| self.err("open table", e))
        })?;
        // Its drop ends the read transaction in redb.
        Ok(GuardedDrop::new(self.guard.clone(), "end read", table))
    }

    /// The value at `key` in `table`, copied out (under the guard).
    fn get_in(&self, table: &ReadTable, key: &[u8]) -> Result<Option<Bytes>> {
        self.guard.call("get", || {
            let v = table.get(key).map_err(|e| self.err("get", e))?;
            match v {
                Some(g) => self
                    .value_of(key, g.value())
                    .map(|v| Some(Bytes::copy_from_slice(v))),
                None if self.checked => self.check_neighbours(table, key).map(|()| None),
                None => Ok(None),
            }
        })
    }

    /// On a miss, checks the pairs on either side of where `key` would be (a flipped key
    /// is reported, not read as absent: `pair_crc::check_neighbours`).
    fn check_neighbours(&self, table: &ReadTable, key: &[u8]) -> Result<()> {
        check_neighbours(
            table,
            &key,
            |k, v| checked_value(&self.name, k, v).map(drop),
            |e| self.err("get", e),
        )
    }

    /// The value of a stored pair: checked against its crc32 and cut from it in a checked
    /// file, as stored in an unchecked one.
    fn value_of<'v>(&self, key: &[u8], stored: &'v [u8]) -> Result<&'v [u8]> {
        if self.checked {
            checked_value(&self.name, key, stored)
        } else {
            Ok(stored)
        }
    }

    fn put(&self, table: &mut RedbTable<'_>, k: &[u8], v: &[u8]) -> Result<()> {
        self.guard.call("insert", || {
            if !self.checked {
                table.insert(k, v).map_err(|e| self.fail("insert", e))?;
                return Ok(());
            }
            insert_checked(table, k, v).map_err(|e| self.fail("insert", e))
        })
    }

    fn remove(&self, table: &mut RedbTable<'_>, k: &[u8]) -> Result<()> {
        self.guard.call("remove", || {
            table.remove(k).map_err(|e| self.fail("remove", e))?;
            Ok(())
        })
    }
}

/// The one table a database keeps its pairs in, open for writing.
type RedbTable<'txn> = redb::Table<'txn, &'static [u8], &'static [u8]>;
/// The table, open for reading (a snapshot of the last commit).
type ReadTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

impl Db for RedbDb {
    fn name(&self) -> &str {
        &self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let table = self.read_table()?;
        self.get_in(&table, key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
        // One read transaction and one table open for all the keys: one snapshot.
        let table = self.read_table()?;
        keys.iter().map(|k| self.get_in(&table, k)).collect()
    }

    fn range(&self, range: KeyRange, direction: Direction) -> Result<DbIter<'_>> {
        self.check_poison()?;
        if range.is_empty() {
            return Ok(Box::new(std::iter::empty()));
        }
        let table = self.read_table()?;
        let r = self.guard.call("range", || {
            table
                .range::<&[u8]>(range.as_ref_bounds())
                .map_err(|e| self.err("range", e))
        })?;
        // The range holds its own read transaction: the table may go now.
        drop(table);
        let (name, checked) = (self.name.clone(), self.checked);
        let map = move |item: RedbItem| {
            let (k, v) = item.map_err(|e| Error::storage(&name, "iterate", e))?;
            let (k, v) = (k.value(), v.value());
            let v = if checked {
                checked_value(&name, k, v)?
            } else {
                v
            };
            Ok((Bytes::copy_from_slice(k), Bytes::copy_from_slice(v)))
        };
        // Each `next` reads pages in redb: under the guard, as is the range's drop.
        let guard = &*self.guard;
        Ok(match direction {
            Direction::Forward => Box::new(GuardedIter::new(guard, "iterate", r.map(map))),
            Direction::Reverse => Box::new(GuardedIter::new(guard, "iterate", r.rev().map(map))),
        })
    }

    fn write(&self, batch: &Batch, durability: Durability) -> Result<()> {
        self.write_with(durability, |table| {
            for op in batch.ops() {
                match op {
                    Op::Put(k, v) => self.put(table, k, v)?,
                    Op::Delete(k) => self.remove(table, k)?,
                }
            }
            Ok(())
        })
    }

    fn write_entries<'a>(
        &self,
        entries: &mut dyn Iterator<Item = EntryRef<'a>>,
        durability: Durability,
    ) -> Result<()> {
        self.write_with(durability, |table| {
            for (k, v) in entries {
                match v {
                    Some(v) => self.put(table, k, v)?,
                    None => self.remove(table, k)?,
                }
            }
            Ok(())
        })
    }

    fn disk_size_bytes(&self) -> Result<u64> {
        match (&self.path, &self.fs) {
            (Some(p), Some(fs)) => fs.allocated_bytes(p).map_err(|e| self.err("stat", e)),
            _ => Ok(0),
        }
    }
}
