//! A home directory: the three databases (block store, state, app) under one directory,
//! guarded by an exclusive lock, on one of two storage engines (ADR 0012): three redb files
//! (the default) or three keyspaces of one journal engine (ADR 0008) in `journal/`.
//!
//! Invariant: at most one open `Home` per directory, across threads and processes (an
//! `flock` on `LOCK`, per open file description, so a second open in the same process fails
//! too). The lock is held as long as the `Home` or any of its databases is open (each
//! database keeps it alive, and closes its files before releasing it), so a second open gets
//! `Error::HomeLocked`, never redb's "already open".
//! Invariant: a home written by another format version is refused, never read; a home is
//! opened on the engine its `FORMAT` records, and an explicit request for another engine is
//! refused (`Error::HomeEngine`) before anything is written.
//! Invariant: every file operation goes through the file layer (`crate::fs`), so a
//! simulated file system can cut the power at each; the home directory's own entry and the
//! `FORMAT` file (with its engine) are durable before any database is created, and each
//! database's name before anything is written into it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::{Db, Direction, KeyRange, RedbDb, RedbOptions};
pub use crate::engine::HomeEngine;
use crate::error::{Error, Result};
use crate::fs::{FileLock, FileSystem, FsFile, OpenMode, ScratchFs, StdFs, create_dir_all_durably};
use crate::journal::{
    JournalEngine, JournalOptions, KeyspaceIndex, KeyspaceOptions, SEPARATE_VALUES_FROM_BYTES,
};

mod format;
mod rollback_intent;

pub(crate) use format::format_text;
use format::{EngineFiles, FORMAT_BYTES_MAX, Recorded, parse_format};
pub(crate) use rollback_intent::{
    Intent, Opaque, RebuiltState, Step, finish_stores, read_intent, write_intent,
};
pub use rollback_intent::{ROLLBACK_INTENT_FILE, pending_rollback};

/// The home layout version this build reads and writes. 2: the chain seam (ADR 0009) — a
/// block meta keeps the chain's header bytes length-prefixed, the state store keeps history
/// slots, the rollback intent keeps the rebuilt state as the chain's bytes. A version-1 home
/// is refused with [`Error::HomeVersion`] (rebuild it by syncing again); it is never read.
/// The engine (ADR 0012) is a second line of `FORMAT`, absent for redb.
pub const HOME_FORMAT_VERSION: u32 = 2;

pub(crate) const FORMAT_FILE: &str = "FORMAT";
/// A redb home's database files, in the order a new home creates them.
const REDB_FILES: [&str; 3] = [BLOCK_STORE_FILE, STATE_FILE, APP_FILE];
const LOCK_FILE: &str = "LOCK";
/// File name of the block store database (redb engine).
pub const BLOCK_STORE_FILE: &str = "blockstore.redb";
/// File name of the state database (redb engine).
pub const STATE_FILE: &str = "state.redb";
/// File name of the application database (redb engine).
pub const APP_FILE: &str = "app.redb";
/// Directory of the journal engine in a journal home.
pub const JOURNAL_DIR: &str = "journal";
/// The three databases' names: the redb databases' error names and the journal's
/// keyspaces, in flush order.
const DB_NAMES: [&str; 3] = ["block store", "state", "app"];

/// The engine of a new home when none is asked for. Why the journal: one sync per
/// consensus block and block sync near its in-memory floor (ADR 0012); a damaged journal
/// home is refused or repaired like a redb one (`tests/damaged_home.rs`). A redb home opens
/// on redb, as its `FORMAT` records.
pub const HOME_ENGINE_DEFAULT: HomeEngine = HomeEngine::Journal;

impl Default for HomeEngine {
    /// [`HOME_ENGINE_DEFAULT`].
    fn default() -> HomeEngine {
        HOME_ENGINE_DEFAULT
    }
}

/// How a home is opened: `HomeOptions::default()` and the `with_…` methods.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HomeOptions {
    /// The engine asked for: `None` opens an existing home on the engine it records and
    /// creates a new one on `new_home_engine`; `Some(e)` creates a new home on `e` and
    /// refuses an existing home recorded with another engine ([`Error::HomeEngine`]).
    pub engine: Option<HomeEngine>,
    /// The engine of a new home when `engine` is `None`: [`HOME_ENGINE_DEFAULT`], or redb
    /// for options made from [`RedbOptions`]. An existing home ignores it.
    pub new_home_engine: HomeEngine,
    /// Options of the three redb databases (redb engine).
    pub redb: RedbOptions,
    /// Options of the journal engine (journal engine).
    pub journal: JournalOptions,
    /// How a journal home's app keyspace is indexed: `None` keeps what an existing home
    /// records and gives a new journal home sorted runs; `Some(index)` creates a
    /// new journal home with it (recorded in `FORMAT`) and refuses, with
    /// [`Error::InvalidInput`] and nothing written, an existing home recorded otherwise or
    /// `Runs` on a redb home. [`KeyspaceIndex::Runs`] (ADR 0014) writes the app's state as
    /// sorted run files instead of inserting it into the index's B-tree.
    pub app_index: Option<KeyspaceIndex>,
}

impl HomeOptions {
    /// These options with [`HomeOptions::engine`] set (a value, or `None`).
    pub fn with_engine(self, engine: impl Into<Option<HomeEngine>>) -> Self {
        HomeOptions {
            engine: engine.into(),
            ..self
        }
    }

    /// These options with [`HomeOptions::new_home_engine`] set.
    pub fn with_new_home_engine(self, new_home_engine: HomeEngine) -> Self {
        HomeOptions {
            new_home_engine,
            ..self
        }
    }

    /// These options with [`HomeOptions::redb`] set.
    pub fn with_redb(self, redb: RedbOptions) -> Self {
        HomeOptions { redb, ..self }
    }

    /// These options with [`HomeOptions::journal`] set.
    pub fn with_journal(self, journal: JournalOptions) -> Self {
        HomeOptions { journal, ..self }
    }

    /// These options with [`HomeOptions::app_index`] set (a value, or `None`).
    pub fn with_app_index(self, app_index: impl Into<Option<KeyspaceIndex>>) -> Self {
        HomeOptions {
            app_index: app_index.into(),
            ..self
        }
    }
}

impl From<&RedbOptions> for HomeOptions {
    /// The recorded engine (redb for a new home), with these redb options.
    fn from(redb: &RedbOptions) -> HomeOptions {
        HomeOptions {
            new_home_engine: HomeEngine::Redb,
            redb: redb.clone(),
            ..HomeOptions::default()
        }
    }
}

impl From<&HomeOptions> for HomeOptions {
    fn from(o: &HomeOptions) -> HomeOptions {
        o.clone()
    }
}

/// The home's exclusive lock, shared by the [`Home`] and its databases: released when the
/// last of them is dropped.
type HomeLock = FileLock;

/// The file system a journal home's engine runs on: the home's, with the lock riding on it
/// and on every file opened through it (a [`JournalEngine`] has no `keep_alive`; it keeps
/// its file system and its files for its whole life, so the lock does too).
#[derive(Debug)]
struct LockedFs {
    inner: Arc<dyn FileSystem>,
    lock: Arc<HomeLock>,
}

/// A file of a [`LockedFs`]. Fields drop in order: the file is closed before its lock
/// clone is released.
#[derive(Debug)]
struct LockedFile {
    file: Box<dyn FsFile>,
    _lock: Arc<HomeLock>,
}

impl FileSystem for LockedFs {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn open_file(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn FsFile>> {
        Ok(Box::new(LockedFile {
            file: self.inner.open_file(path, mode)?,
            _lock: self.lock.clone(),
        }))
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.inner.list_dir(dir)
    }
    fn allocated_bytes(&self, path: &Path) -> std::io::Result<u64> {
        self.inner.allocated_bytes(path)
    }
}

impl FsFile for LockedFile {
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn read_at(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.file.read_at(offset, out)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.file.write_at(offset, data)
    }
    fn write_vectored_at(
        &self,
        offset: u64,
        pieces: &[std::io::IoSlice<'_>],
    ) -> std::io::Result<()> {
        self.file.write_vectored_at(offset, pieces)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> std::io::Result<bool> {
        self.file.punch_hole(offset, len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn start_writeback(&self) -> std::io::Result<()> {
        self.file.start_writeback()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.file.sync_all()
    }
    fn try_lock_exclusive(&self) -> std::io::Result<bool> {
        self.file.try_lock_exclusive()
    }
    fn unlock(&self) -> std::io::Result<()> {
        self.file.unlock()
    }
    fn into_std(self: Box<Self>) -> std::result::Result<std::fs::File, Box<dyn FsFile>> {
        // Never unwrapped: the lock must live exactly as long as the file (the index then
        // runs through the file layer, as on a simulated file system).
        Err(self)
    }
}

/// The engine-specific handles of an open home.
#[derive(Debug)]
enum Storage {
    Redb([Arc<RedbDb>; 3]),
    Journal(JournalEngine),
}

/// An open home directory.
///
/// Its lock is held while the `Home` or any of its databases (`block_store_db`, `state_db`,
/// `app_db`, and every clone of them, e.g. inside a [`crate::Node`]) is alive: dropping the
/// `Home` while a node still uses its databases keeps the home locked until the node is
/// dropped too. [`crate::Node::open_home`] builds a node that owns its home.
///
/// The databases are `Db`s on either engine; [`Home::redb_dbs`] and [`Home::journal`] give
/// the engine's own handles (counters, per-file sizes, checkpoints).
#[derive(Debug)]
pub struct Home {
    path: PathBuf,
    /// Kept for the `Home`'s own lifetime; each database holds a clone.
    _lock: Arc<HomeLock>,
    fs: Arc<dyn FileSystem>,
    storage: Storage,
    /// The block store's database.
    pub block_store_db: Arc<dyn Db>,
    /// The state's database.
    pub state_db: Arc<dyn Db>,
    /// The application's database.
    pub app_db: Arc<dyn Db>,
}

/// `Ok` when `path` holds a home, or what is left of one (a home that lost its `FORMAT`
/// beside its databases is then refused as damaged by the open); an error when it holds
/// neither, so that an open of an existing home creates nothing.
pub(crate) fn require_home(fs: &dyn FileSystem, path: &Path) -> Result<()> {
    let format = fs
        .exists(&path.join(FORMAT_FILE))
        .map_err(home_err(path, "stat FORMAT"))?;
    if format || EngineFiles::find(fs, path)?.any().is_some() {
        return Ok(());
    }
    Err(Error::Home {
        path: path.to_path_buf(),
        op: "open (no flushpoint home here; run `flushpoint sync --home` to create one)",
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })
}

/// `recorded` unless the app index asked (`Some(true)`: runs) contradicts it: runs on a
/// redb home, or another index than the one the home was created with.
fn check_app_index(path: &Path, runs_asked: Option<bool>, recorded: Recorded) -> Result<Recorded> {
    let index = |runs| if runs { "runs" } else { "the tree" };
    match runs_asked {
        Some(true) if recorded.engine == HomeEngine::Redb => Err(Error::InvalidInput(format!(
            "home {}: a redb home's app cannot be indexed by runs (runs need the journal \
             engine)",
            path.display()
        ))),
        Some(runs) if runs != recorded.app_runs => Err(Error::InvalidInput(format!(
            "home {}: its app keyspace is indexed by {}, not {} (fixed when the home was \
             created)",
            path.display(),
            index(recorded.app_runs),
            index(runs),
        ))),
        _ => Ok(recorded),
    }
}

/// The three keyspaces of a journal home, as its `FORMAT` records them: the block store's
/// parts written once, to the journal (ADR 0013), and the app as sorted runs pointing at
/// its large values in the journal (ADR 0014, 0016), on a home whose `FORMAT` says so; a
/// home created before keeps them in the index.
fn journal_keyspaces(engine: &JournalEngine, recorded: &Recorded) -> Result<[Arc<dyn Db>; 3]> {
    let block_store = if recorded.parts_in_journal {
        engine.keyspace_with(
            DB_NAMES[0],
            KeyspaceOptions::separating_values_from(SEPARATE_VALUES_FROM_BYTES),
        )?
    } else {
        engine.keyspace(DB_NAMES[0])?
    };
    // Opened in flush order, as every home's keyspaces always were.
    let state = engine.keyspace(DB_NAMES[1])?;
    let app = if recorded.app_runs {
        let runs = KeyspaceOptions::indexed_by_runs();
        engine.keyspace_with(
            DB_NAMES[2],
            if recorded.app_values_in_journal {
                runs.with_values_separated_from(SEPARATE_VALUES_FROM_BYTES)
            } else {
                runs
            },
        )?
    } else {
        engine.keyspace(DB_NAMES[2])?
    };
    Ok([block_store, state, app].map(|k| k as Arc<dyn Db>))
}

fn home_err(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Home { path, op, source }
}

impl Home {
    /// Creates (if needed) and opens the home at `path`, taking its lock: an existing home
    /// on the engine it records, a new one on [`HOME_ENGINE_DEFAULT`].
    ///
    /// Fails at once with [`Error::HomeLocked`] if another handle holds it, and with
    /// [`Error::HomeVersion`] if it was written by another format version.
    pub fn open(path: &Path) -> Result<Home> {
        Self::open_with(path, HomeOptions::default())
    }

    /// Opens an existing home only (on the engine it records); a missing directory is an
    /// error.
    pub fn open_existing(path: &Path) -> Result<Home> {
        Self::open_existing_on(Arc::new(StdFs), path, HomeOptions::default())
    }

    /// Opens an existing home without writing to it: every file is opened read-only, and
    /// whatever the open and the caller write — redb's headers, a journal recovery, a
    /// handshake's repair, a rollback — is kept in memory ([`ScratchFs`], at most
    /// [`crate::fs::SCRATCH_BYTES_MAX`]) and dropped with the `Home`. For deciding whether a
    /// command refuses before opening the home for writing, and for reading a home as it
    /// is on disk. The lock is taken on the real `LOCK` file: a home a writer holds is
    /// [`Error::HomeLocked`], and no writer opens it meanwhile.
    ///
    /// A directory without a home is an error (nothing is created). `options` as
    /// [`Home::open_with`]; a journal home prepares no spare segment.
    pub fn open_read_only(path: &Path, options: impl Into<HomeOptions>) -> Result<Home> {
        let mut options = options.into();
        options.journal.prepare_segments = false;
        Self::open_existing_on(Self::read_only_fs(), path, options)
    }

    /// A fresh copy-on-write layer over the real file system: what
    /// [`Home::open_read_only`] opens a home on.
    pub fn read_only_fs() -> Arc<dyn FileSystem> {
        Arc::new(ScratchFs::over(Arc::new(StdFs)))
    }

    /// As [`Home::open_on`], for a home that exists: a missing `FORMAT` is an error and
    /// nothing is created.
    fn open_existing_on(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        options: HomeOptions,
    ) -> Result<Home> {
        require_home(&*fs, path)?;
        Self::open_on(fs, path, options)
    }

    /// As [`Home::open`], with options: [`HomeOptions`] (the engine to create or insist
    /// on), or a `&RedbOptions` (the recorded engine).
    pub fn open_with(path: &Path, options: impl Into<HomeOptions>) -> Result<Home> {
        Self::open_on(Arc::new(StdFs), path, options)
    }

    /// As [`Home::open_with`], on the file system `fs` (tests pass a simulated one): every
    /// file operation of the home and of its databases goes through it.
    ///
    /// An explicit engine other than the recorded one is refused with
    /// [`Error::HomeEngine`] before anything is written. A rollback interrupted by a crash
    /// is finished here when its remaining steps need no app (the databases are then at its
    /// target when this returns `Ok`); otherwise the home is refused with
    /// [`Error::RollbackInterrupted`], nothing changed (see [`crate::rollback`]).
    pub fn open_on(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        options: impl Into<HomeOptions>,
    ) -> Result<Home> {
        let home = Self::open_unchecked(fs, path, &options.into())?;
        // Never hand out a half-rolled-back home: the handshake would take its shape for a
        // crash it repairs and undo the rollback.
        rollback_intent::finish_or_refuse(&home)?;
        Ok(home)
    }

    /// As [`Home::open_on`], leaving an interrupted rollback as it is (for the rollback).
    pub(crate) fn open_unchecked(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        options: &HomeOptions,
    ) -> Result<Home> {
        let lock = Self::lock(&*fs, path)?;
        // Decided (and, for a new home, durable) before any database is opened: a refusal
        // writes nothing, and no database exists without the FORMAT naming its engine.
        let recorded = Self::check_format(
            &*fs,
            path,
            options.engine.unwrap_or(options.new_home_engine),
            options.engine.is_some(),
            options.app_index,
        )?;
        let storage = match recorded.engine {
            HomeEngine::Redb => Storage::Redb(Self::open_redb(&fs, path, options, &lock)?),
            HomeEngine::Journal => {
                // Every file of the engine holds the lock until it is closed (see LockedFs).
                let locked: Arc<dyn FileSystem> = Arc::new(LockedFs {
                    inner: fs.clone(),
                    lock: lock.clone(),
                });
                Storage::Journal(JournalEngine::open(
                    locked,
                    &path.join(JOURNAL_DIR),
                    options.journal.clone(),
                )?)
            }
        };
        let [block_store_db, state_db, app_db]: [Arc<dyn Db>; 3] = match &storage {
            Storage::Redb(dbs) => dbs.clone().map(|d| d as Arc<dyn Db>),
            Storage::Journal(engine) => journal_keyspaces(engine, &recorded)?,
        };
        Ok(Home {
            block_store_db,
            state_db,
            app_db,
            storage,
            path: path.to_path_buf(),
            _lock: lock,
            fs,
        })
    }

    /// Creates the home's directory (durably) and takes its `LOCK`: [`Error::HomeLocked`]
    /// when another handle holds it.
    fn lock(fs: &dyn FileSystem, path: &Path) -> Result<Arc<HomeLock>> {
        // The directory's entry must be durable before anything in it is: a synced database
        // in a directory whose own name a power cut loses is lost with it.
        create_dir_all_durably(fs, path).map_err(home_err(path, "create directory"))?;
        // The lock file's entry need not be durable: a lost one is created again.
        let lock = fs
            .open_file(&path.join(LOCK_FILE), OpenMode::CreateOrOpen)
            .map_err(home_err(path, "open its LOCK file"))?;
        match lock.try_lock_exclusive() {
            Ok(true) => Ok(Arc::new(FileLock::new(lock))),
            Ok(false) => Err(Error::HomeLocked {
                path: path.to_path_buf(),
            }),
            Err(e) => Err(home_err(path, "lock")(e)),
        }
    }

    /// Opens (creating the missing ones of a new home, in order) the three redb files, each
    /// keeping `lock` until it is closed. A file missing before one present, or beside one
    /// holding data, was lost, not yet created: [`Error::HomeDamaged`] before the missing one
    /// is created empty.
    fn open_redb(
        fs: &Arc<dyn FileSystem>,
        path: &Path,
        options: &HomeOptions,
        lock: &Arc<HomeLock>,
    ) -> Result<[Arc<RedbDb>; 3]> {
        let open = |file: &str, name: &str| -> Result<Arc<RedbDb>> {
            let mut db = RedbDb::open_on(fs.clone(), &path.join(file), name, &options.redb)?;
            // The database keeps the home locked until it is closed: a handle that
            // outlives the `Home` must not let a second open reach its file.
            db.keep_alive(lock.clone());
            Ok(Arc::new(db))
        };
        // A new home's files are created in this order after its FORMAT: a crash while
        // creating them leaves the first ones, empty.
        let present = EngineFiles::find(&**fs, path)?.redb;
        let lost = |problem: String| Error::HomeDamaged {
            path: path.to_path_buf(),
            problem,
        };
        if present[..] != REDB_FILES[..present.len()] {
            let missing = REDB_FILES.iter().find(|f| !present.contains(f));
            return Err(lost(format!(
                "its {} is missing while {} exist",
                missing.unwrap_or(&""),
                present.join(", ")
            )));
        }
        let mut dbs: Vec<Arc<RedbDb>> = Vec::with_capacity(REDB_FILES.len());
        for (file, name) in REDB_FILES.iter().zip(DB_NAMES) {
            if dbs.len() == present.len() && !dbs.is_empty() {
                for (db, held) in dbs.iter().zip(&present) {
                    let first = db.range(KeyRange::all(), Direction::Forward)?.next();
                    if first.transpose()?.is_some() {
                        return Err(lost(format!(
                            "its {file} is missing while {held} holds data"
                        )));
                    }
                }
            }
            dbs.push(open(file, name)?);
        }
        Ok(<[Arc<RedbDb>; 3]>::try_from(dbs)
            .unwrap_or_else(|_| unreachable!("one database per file")))
    }

    /// Reads `FORMAT` (version and engine) and checks the engine (when `engine_asked`) and
    /// `app_index` against it; for a new home, writes it durably, recording `engine` and the
    /// app index asked.
    fn check_format(
        fs: &dyn FileSystem,
        path: &Path,
        engine: HomeEngine,
        engine_asked: bool,
        app_index: Option<KeyspaceIndex>,
    ) -> Result<Recorded> {
        let app_runs_asked = app_index.map(|i| i == KeyspaceIndex::Runs);
        let fpath = path.join(FORMAT_FILE);
        match fs.open_file(&fpath, OpenMode::Existing) {
            Ok(f) => {
                let recorded = Self::read_format(fs, path, &*f)?;
                if engine_asked && engine != recorded.engine {
                    return Err(Error::HomeEngine {
                        path: path.to_path_buf(),
                        recorded: recorded.engine,
                        requested: engine,
                    });
                }
                check_app_index(path, app_runs_asked, recorded)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // FORMAT is durable before any database is created: databases without it
                // are a damaged home, never a new one to create beside them.
                if let Some(files) = EngineFiles::find(fs, path)?.any() {
                    return Err(Error::HomeDamaged {
                        path: path.to_path_buf(),
                        problem: format!("it has no FORMAT file, but it holds {files}"),
                    });
                }
                // A new journal home indexes its app by runs unless asked otherwise (ADR 0014:
                // faster at 10k and 300k light blocks).
                let app_runs = app_runs_asked.unwrap_or(engine == HomeEngine::Journal);
                // Refused before the FORMAT is written: nothing is.
                check_app_index(
                    path,
                    app_runs_asked,
                    Recorded {
                        engine,
                        parts_in_journal: false,
                        app_runs: engine == HomeEngine::Journal && app_runs,
                        app_values_in_journal: false,
                    },
                )?;
                Self::write_format(fs, path, engine, app_runs)?;
                // A new journal home's app runs point at its large values in the journal
                // (ADR 0016: written once, where runs held a second copy).
                Ok(Recorded {
                    engine,
                    parts_in_journal: engine == HomeEngine::Journal,
                    app_runs,
                    app_values_in_journal: app_runs,
                })
            }
            Err(e) => Err(home_err(path, "open FORMAT")(e)),
        }
    }

    /// What an existing home's `FORMAT` (open as `f`) records, checked against the files
    /// the home holds: [`Error::HomeDamaged`] when it is unreadable beside databases, too
    /// long, or names an engine whose files are not the ones present.
    fn read_format(fs: &dyn FileSystem, path: &Path, f: &dyn FsFile) -> Result<Recorded> {
        let len = f.len().map_err(home_err(path, "read FORMAT"))?;
        if len > FORMAT_BYTES_MAX {
            return Err(Error::HomeDamaged {
                path: path.to_path_buf(),
                problem: format!(
                    "its FORMAT is {len} bytes, longer than any FORMAT \
                     ({FORMAT_BYTES_MAX} bytes at most)"
                ),
            });
        }
        let mut bytes = vec![0; len as usize];
        f.read_at(0, &mut bytes)
            .map_err(home_err(path, "read FORMAT"))?;
        let recorded = match parse_format(path, &String::from_utf8_lossy(&bytes)) {
            // An unreadable FORMAT beside a home's databases is a damaged home's, not a
            // directory that is no home.
            Err(e @ Error::Home { .. }) => {
                return Err(match EngineFiles::find(fs, path)?.any() {
                    Some(files) => Error::HomeDamaged {
                        path: path.to_path_buf(),
                        problem: format!(
                            "its FORMAT is not one flushpoint writes ({e}), but it holds \
                             {files}"
                        ),
                    },
                    None => e,
                });
            }
            r => r?,
        };
        // A journal home whose FORMAT was cut to its first line reads as redb, and a redb
        // home's FORMAT can be replaced by a journal one: either way, opening on the
        // recorded engine would create its databases empty beside the data.
        if let Some(other) = EngineFiles::find(fs, path)?.other_than(recorded.engine) {
            return Err(Error::HomeDamaged {
                path: path.to_path_buf(),
                problem: format!(
                    "its FORMAT records the {} engine, but it holds {other}, the {} engine's \
                     files",
                    recorded.engine,
                    recorded.engine.other()
                ),
            });
        }
        Ok(recorded)
    }

    /// Writes a new home's `FORMAT` durably: a temporary file, fsynced, renamed, the
    /// directory fsynced.
    fn write_format(
        fs: &dyn FileSystem,
        path: &Path,
        engine: HomeEngine,
        app_runs: bool,
    ) -> Result<()> {
        let tmp = path.join("FORMAT.tmp");
        let f = fs
            .open_file(&tmp, OpenMode::CreateTruncate)
            .map_err(home_err(path, "create FORMAT"))?;
        f.write_at(0, format_text(engine, app_runs).as_bytes())
            .map_err(home_err(path, "write FORMAT"))?;
        // Without this sync the rename can survive a power cut with the bytes lost: an empty
        // FORMAT, which every later open refuses as "not a flushpoint home".
        f.sync_all().map_err(home_err(path, "fsync FORMAT"))?;
        fs.rename(&tmp, &path.join(FORMAT_FILE))
            .map_err(home_err(path, "rename FORMAT"))?;
        // The FORMAT file's directory entry must be durable before any database is: a home
        // with databases and no FORMAT would be taken for any version's, and a journal whose
        // FORMAT a cut lost would be opened as a new redb home.
        fs.sync_dir(path)
            .map_err(home_err(path, "fsync home directory"))
    }

    /// The home's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The engine the home's databases live on (the one its `FORMAT` records).
    pub fn engine(&self) -> HomeEngine {
        match self.storage {
            Storage::Redb(_) => HomeEngine::Redb,
            Storage::Journal(_) => HomeEngine::Journal,
        }
    }

    /// On a redb home, its three databases as redb handles (block store, state, app: the
    /// same databases as the `Db` fields), for what only redb has (backend counters, the
    /// file's path and size); `None` on a journal home.
    pub fn redb_dbs(&self) -> Option<[&Arc<RedbDb>; 3]> {
        match &self.storage {
            Storage::Redb([b, s, a]) => Some([b, s, a]),
            Storage::Journal(_) => None,
        }
    }

    /// On a journal home, its engine (counts, checkpoints, disk size); `None` on redb.
    pub fn journal(&self) -> Option<&JournalEngine> {
        match &self.storage {
            Storage::Journal(e) => Some(e),
            Storage::Redb(_) => None,
        }
    }

    /// Bytes the home's databases occupy on disk: the three redb files, or the journal's
    /// segments and index.
    pub fn disk_size_bytes(&self) -> Result<u64> {
        match &self.storage {
            Storage::Redb(dbs) => dbs.iter().map(|d| d.disk_size_bytes()).sum(),
            Storage::Journal(e) => e.disk_size_bytes(),
        }
    }

    /// The file system the home was opened on.
    pub(crate) fn fs(&self) -> &dyn FileSystem {
        &*self.fs
    }
}
