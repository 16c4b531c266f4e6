//! `--save-flush-kill-home`: the directory the first home killed inside a flush point is
//! copied to, for `inspect`.
//!
//! Invariant: a directory that is not new or empty (a home above all) is refused before the
//! test starts and left untouched; the claimed directory is locked with its own `LOCK` (the
//! home's protocol) for the whole run, and left as it was found if nothing was saved in it.

use std::path::{Path, PathBuf};

use crate::cli::error::{CliError, CliResult};

/// The home's lock file (the library's `LOCK`: an exclusive `flock` while a home is open).
const LOCK_FILE: &str = "LOCK";
/// The file naming a directory a flushpoint home.
const FORMAT_FILE: &str = "FORMAT";

/// The `--save-flush-kill-home` directory, claimed for this run: new or empty, and locked
/// with its own `LOCK` (the home's protocol) from the start, so no `flushpoint` opens it
/// while the copy is written.
pub struct SaveDir {
    path: PathBuf,
    /// Holds the flock on `path/LOCK` for the run.
    _lock: std::fs::File,
    /// The run created `path` (removed again if nothing was saved in it).
    created: bool,
    /// The home has been copied in.
    saved: bool,
}

impl SaveDir {
    /// Claims `dst`, refusing (usage error, nothing written) an existing non-directory, a
    /// flushpoint home, a locked directory, a non-empty one, and one that holds or lies
    /// in the work directory `work`.
    pub fn claim(dst: &Path, work: &Path) -> CliResult<SaveDir> {
        let shown = dst.display();
        let refuse = |why: String| {
            CliError::usage(format!(
                "--save-flush-kill-home {shown}: {why}; name a new or empty directory"
            ))
        };
        let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let (dst_abs, work_abs) = (abs(dst), abs(work));
        if dst_abs.starts_with(&work_abs) || work_abs.starts_with(&dst_abs) {
            return Err(refuse(format!(
                "overlaps the work directory {}",
                work.display()
            )));
        }
        let created = match std::fs::symlink_metadata(dst) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dst).map_err(|e| {
                    CliError::failure(format!("cannot create {shown}: {e}; pick a writable DIR"))
                })?;
                true
            }
            Err(e) => return Err(refuse(format!("cannot read it: {e}"))),
            Ok(m) if !m.is_dir() => return Err(refuse("exists and is not a directory".into())),
            Ok(_) => {
                if dst.join(FORMAT_FILE).exists() {
                    return Err(refuse(
                        "is a flushpoint home (it has a FORMAT file); it is left as it is".into(),
                    ));
                }
                if is_locked(&dst.join(LOCK_FILE)) {
                    return Err(refuse("is locked: a `flushpoint` is using it".into()));
                }
                let mut entries =
                    std::fs::read_dir(dst).map_err(|e| refuse(format!("cannot read it: {e}")))?;
                if entries.next().is_some() {
                    return Err(refuse("exists and is not empty".into()));
                }
                false
            }
        };
        let lock = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(dst.join(LOCK_FILE))
            .map_err(|e| refuse(format!("cannot create its LOCK: {e}")))?;
        if lock.try_lock().is_err() {
            // Another process created and locked it between the check and here.
            return Err(refuse("is locked: a `flushpoint` is using it".into()));
        }
        Ok(SaveDir {
            path: dst.to_path_buf(),
            _lock: lock,
            created,
            saved: false,
        })
    }

    /// Copies `home` (killed, not open) in, but for its `LOCK`: this one's stays held. Only
    /// the first home is kept: once one is saved, later calls do nothing.
    pub fn save_first(&mut self, home: &Path) -> CliResult<()> {
        if self.saved {
            return Ok(());
        }
        copy_home(home, &self.path).map_err(|e| {
            CliError::failure(format!(
                "cannot copy the home to {}: {e}",
                self.path.display()
            ))
        })?;
        self.saved = true;
        Ok(())
    }
}

impl Drop for SaveDir {
    /// A directory nothing was saved in is left as it was found (or not left at all).
    fn drop(&mut self) {
        if !self.saved {
            if self.created {
                let _ = std::fs::remove_dir_all(&self.path);
            } else {
                let _ = std::fs::remove_file(self.path.join(LOCK_FILE));
            }
        }
    }
}

/// Whether `lock` exists and another open file description holds its `flock` (probed with
/// a shared, non-blocking lock, released at once).
fn is_locked(lock: &Path) -> bool {
    match std::fs::File::open(lock) {
        Ok(f) => matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
}

/// Copies a home's files, and its subdirectories' (a journal home's `journal/`), but not
/// its top-level `LOCK` (the destination holds its own).
fn copy_home(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let t = e.file_type()?;
        if t.is_file() {
            if e.file_name() == LOCK_FILE && dst.join(LOCK_FILE).exists() {
                continue;
            }
            std::fs::copy(e.path(), dst.join(e.file_name()))?;
        } else if t.is_dir() {
            copy_home(&e.path(), &dst.join(e.file_name()))?;
        }
    }
    Ok(())
}
