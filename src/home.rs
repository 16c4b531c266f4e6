//! A home directory: the three databases (block store, state, app) under one directory,
//! guarded by an exclusive lock.
//!
//! Invariant: at most one open `Home` per directory, across threads and processes (an
//! `flock` on `LOCK`, per open file description, so a second open in the same process fails
//! too). The lock is held as long as the `Home` or any of its databases is open (each
//! database keeps it alive, and closes its file before releasing it), so a second open gets
//! `Error::HomeLocked`, never redb's "already open".
//! Invariant: a home written by another format version is refused, never read.
//! Invariant: every file operation goes through the file layer (`crate::fs`), so a
//! simulated file system can cut the power at each; the home directory's own entry, the
//! `FORMAT` file and each database's name are durable before anything is written into them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::{RedbDb, RedbOptions};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, FsFile, OpenMode, StdFs, create_dir_all_durably};

/// The home layout version this build reads and writes. 2: the chain seam (ADR 0009) — a
/// block meta keeps the chain's header bytes length-prefixed, the state store keeps history
/// slots, the rollback intent keeps the rebuilt state as the chain's bytes. A version-1 home
/// is refused with [`Error::HomeVersion`] (rebuild it by syncing again); it is never read.
pub const HOME_FORMAT_VERSION: u32 = 2;

pub(crate) const FORMAT_FILE: &str = "FORMAT";
const LOCK_FILE: &str = "LOCK";
/// File name of the block store database.
pub const BLOCK_STORE_FILE: &str = "blockstore.redb";
/// File name of the state database.
pub const STATE_FILE: &str = "state.redb";
/// File name of the application database.
pub const APP_FILE: &str = "app.redb";

/// The home's exclusive lock, shared by the [`Home`] and its three databases: released
/// when the last of them is dropped.
#[derive(Debug)]
struct HomeLock(Box<dyn FsFile>);

impl Drop for HomeLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// An open home directory.
///
/// Its lock is held while the `Home` or any of its databases (`block_store_db`, `state_db`,
/// `app_db`, and every clone of them, e.g. inside a [`crate::Node`]) is alive: dropping the
/// `Home` while a node still uses its databases keeps the home locked until the node is
/// dropped too. [`crate::Node::open_home`] builds a node that owns its home.
#[derive(Debug)]
pub struct Home {
    path: PathBuf,
    /// Kept for the `Home`'s own lifetime; each database holds a clone.
    _lock: Arc<HomeLock>,
    fs: Arc<dyn FileSystem>,
    /// The block store's database.
    pub block_store_db: Arc<RedbDb>,
    /// The state's database.
    pub state_db: Arc<RedbDb>,
    /// The application's database.
    pub app_db: Arc<RedbDb>,
}

fn home_err(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Home { path, op, source }
}

impl Home {
    /// Creates (if needed) and opens the home at `path`, taking its lock.
    ///
    /// Fails at once with [`Error::HomeLocked`] if another handle holds it, and with
    /// [`Error::HomeVersion`] if it was written by another format version.
    pub fn open(path: &Path) -> Result<Home> {
        Self::open_with(path, &RedbOptions::default())
    }

    /// Opens an existing home only; a missing directory is an error.
    pub fn open_existing(path: &Path) -> Result<Home> {
        if !StdFs
            .exists(&path.join(FORMAT_FILE))
            .map_err(home_err(path, "stat FORMAT"))?
        {
            return Err(Error::Home {
                path: path.to_path_buf(),
                op: "open (no flushpoint home here; run `flushpoint sync --home` to create one)",
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        Self::open(path)
    }

    /// As [`Home::open`], with redb options.
    pub fn open_with(path: &Path, options: &RedbOptions) -> Result<Home> {
        Self::open_on(Arc::new(StdFs), path, options)
    }

    /// As [`Home::open_with`], on the file system `fs` (tests pass a simulated one): every
    /// file operation of the home and of its databases goes through it.
    ///
    /// A rollback interrupted by a crash is finished here when its remaining steps need no
    /// app (the databases are then at its target when this returns `Ok`); otherwise the home
    /// is refused with [`Error::RollbackInterrupted`], nothing changed (see
    /// [`crate::rollback`]).
    pub fn open_on(fs: Arc<dyn FileSystem>, path: &Path, options: &RedbOptions) -> Result<Home> {
        let home = Self::open_unchecked(fs, path, options)?;
        // Never hand out a half-rolled-back home: the handshake would take its shape for a
        // crash it repairs and undo the rollback.
        crate::rollback::finish_or_refuse(&home)?;
        Ok(home)
    }

    /// As [`Home::open_on`], leaving an interrupted rollback as it is (for the rollback).
    pub(crate) fn open_unchecked(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        options: &RedbOptions,
    ) -> Result<Home> {
        // The directory's entry must be durable before anything in it is: a synced database
        // in a directory whose own name a power cut loses is lost with it.
        create_dir_all_durably(&*fs, path).map_err(home_err(path, "create directory"))?;
        // The lock file's entry need not be durable: a lost one is created again.
        let lock = fs
            .open_file(&path.join(LOCK_FILE), OpenMode::CreateOrOpen)
            .map_err(home_err(path, "open lock file"))?;
        match lock.try_lock_exclusive() {
            Ok(true) => {}
            Ok(false) => {
                return Err(Error::HomeLocked {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(home_err(path, "lock")(e)),
        }
        let lock = Arc::new(HomeLock(lock));
        Self::check_format(&*fs, path)?;
        let open = |file: &str, name: &str| -> Result<Arc<RedbDb>> {
            let mut db = RedbDb::open_on(fs.clone(), &path.join(file), name, options)?;
            // The database keeps the home locked until it is closed: a handle that outlives
            // the `Home` must not let a second open reach its file.
            db.keep_alive(lock.clone());
            Ok(Arc::new(db))
        };
        Ok(Home {
            block_store_db: open(BLOCK_STORE_FILE, "block store")?,
            state_db: open(STATE_FILE, "state")?,
            app_db: open(APP_FILE, "app")?,
            path: path.to_path_buf(),
            _lock: lock,
            fs,
        })
    }

    fn check_format(fs: &dyn FileSystem, path: &Path) -> Result<()> {
        let fpath = path.join(FORMAT_FILE);
        match fs.open_file(&fpath, OpenMode::Existing) {
            Ok(f) => {
                let mut bytes = vec![0; f.len().map_err(home_err(path, "read FORMAT"))? as usize];
                f.read_at(0, &mut bytes)
                    .map_err(home_err(path, "read FORMAT"))?;
                let s = String::from_utf8_lossy(&bytes);
                let found = s
                    .trim()
                    .strip_prefix("flushpoint home format ")
                    .and_then(|v| v.parse::<u32>().ok())
                    .ok_or_else(|| Error::Home {
                        path: path.to_path_buf(),
                        op: "read FORMAT (not a flushpoint home)",
                        source: std::io::Error::from(std::io::ErrorKind::InvalidData),
                    })?;
                if found != HOME_FORMAT_VERSION {
                    return Err(Error::HomeVersion {
                        path: path.to_path_buf(),
                        found,
                        expected: HOME_FORMAT_VERSION,
                    });
                }
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let tmp = path.join("FORMAT.tmp");
                let f = fs
                    .open_file(&tmp, OpenMode::CreateTruncate)
                    .map_err(home_err(path, "create FORMAT"))?;
                let text = format!("flushpoint home format {HOME_FORMAT_VERSION}\n");
                f.write_at(0, text.as_bytes())
                    .map_err(home_err(path, "write FORMAT"))?;
                // Without this sync the rename can survive a power cut with the bytes lost:
                // an empty FORMAT, which every later open refuses as "not a flushpoint home".
                f.sync_all().map_err(home_err(path, "fsync FORMAT"))?;
                fs.rename(&tmp, &fpath)
                    .map_err(home_err(path, "rename FORMAT"))?;
                // The FORMAT file's directory entry must be durable before any database is:
                // a home with databases and no FORMAT would be taken for any version's.
                fs.sync_dir(path)
                    .map_err(home_err(path, "fsync home directory"))?;
                Ok(())
            }
            Err(e) => Err(home_err(path, "open FORMAT")(e)),
        }
    }

    /// The home's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file system the home was opened on.
    pub(crate) fn fs(&self) -> &dyn FileSystem {
        &*self.fs
    }
}
