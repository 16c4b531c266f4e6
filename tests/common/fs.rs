//! A `SimFs` with hooks at chosen paths, for tests that need one file operation to fail or
//! to wait: an open that fails, an unlink that takes effect and then reports the file gone,
//! a writeback start that fails, and `sync_data` calls held until the test lets them go.
//!
//! Invariant: every call the hooks do not name goes to the `SimFs` unchanged.

use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use flushpoint::{FileSystem, FsFile, OpenMode, SimFs};

/// What a [`HookedFs`] does at its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// Opening the file fails with `EIO`.
    FailOpen(PathBuf),
    /// Removing the file removes it, then reports `NotFound` (an unlink that took effect
    /// and returned an error, or a file another hand deleted).
    RemoveGone(PathBuf),
    /// `sync_data` and `sync_all` on files opened under this directory wait while the
    /// [`SyncGate`] is closed.
    HoldSyncsUnder(PathBuf),
    /// `start_writeback` on files opened under this directory fails with `EIO` (a write
    /// error the kernel reports when asked to write back).
    FailWritebackUnder(PathBuf),
}

/// Lets held syncs go, and counts those waiting.
#[derive(Debug, Default)]
pub struct SyncGate {
    /// (closed, syncs waiting now)
    state: Mutex<(bool, usize)>,
    changed: Condvar,
}

impl SyncGate {
    /// A closed gate.
    pub fn closed() -> Arc<SyncGate> {
        Arc::new(SyncGate {
            state: Mutex::new((true, 0)),
            changed: Condvar::new(),
        })
    }

    /// An open gate (holds nothing until closed).
    pub fn open_gate() -> Arc<SyncGate> {
        Arc::new(SyncGate::default())
    }

    /// Lets every held sync, and every later one, go.
    pub fn open(&self) {
        self.state.lock().expect("gate lock").0 = false;
        self.changed.notify_all();
    }

    /// Holds every later sync until [`SyncGate::open`].
    pub fn close(&self) {
        self.state.lock().expect("gate lock").0 = true;
    }

    /// Waits until `n` syncs are held, up to `timeout`; false when they never were.
    pub fn wait_for_held(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = self.state.lock().expect("gate lock");
        while st.1 < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self.changed.wait_timeout(st, left).expect("gate lock").0;
        }
        true
    }

    fn pass(&self) {
        let mut st = self.state.lock().expect("gate lock");
        st.1 += 1;
        self.changed.notify_all();
        while st.0 {
            st = self.changed.wait(st).expect("gate lock");
        }
        st.1 -= 1;
    }
}

/// A `SimFs` with one [`Hook`].
#[derive(Debug, Clone)]
pub struct HookedFs {
    pub inner: SimFs,
    pub hook: Hook,
    /// The gate of [`Hook::HoldSyncsUnder`] (unused by the other hooks).
    pub gate: Arc<SyncGate>,
}

impl HookedFs {
    /// `inner` with `hook`; a [`Hook::HoldSyncsUnder`] starts closed.
    pub fn new(inner: SimFs, hook: Hook) -> HookedFs {
        HookedFs {
            inner,
            hook,
            gate: SyncGate::closed(),
        }
    }
}

impl FileSystem for HookedFs {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn open_file(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn FsFile>> {
        match &self.hook {
            Hook::FailOpen(at) if at == path => Err(std::io::Error::from_raw_os_error(libc::EIO)),
            Hook::HoldSyncsUnder(dir) if path.starts_with(dir) => Ok(Box::new(HeldFile {
                inner: self.inner.open_file(path, mode)?,
                gate: self.gate.clone(),
                fail_writeback: false,
            })),
            Hook::FailWritebackUnder(dir) if path.starts_with(dir) => Ok(Box::new(HeldFile {
                inner: self.inner.open_file(path, mode)?,
                gate: SyncGate::open_gate(),
                fail_writeback: true,
            })),
            _ => self.inner.open_file(path, mode),
        }
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        if matches!(&self.hook, Hook::RemoveGone(at) if at == path) {
            self.inner.remove_file(path)?;
            return Err(std::io::ErrorKind::NotFound.into());
        }
        self.inner.remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn allocated_bytes(&self, path: &Path) -> std::io::Result<u64> {
        self.inner.allocated_bytes(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        self.inner.list_dir(dir)
    }
}

/// A file whose syncs pass a [`SyncGate`] first, and whose writeback start may fail.
#[derive(Debug)]
struct HeldFile {
    inner: Box<dyn FsFile>,
    gate: Arc<SyncGate>,
    fail_writeback: bool,
}

impl FsFile for HeldFile {
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, out)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.inner.write_at(offset, data)
    }
    fn write_vectored_at(&self, offset: u64, pieces: &[IoSlice<'_>]) -> std::io::Result<()> {
        self.inner.write_vectored_at(offset, pieces)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn punch_hole(&self, offset: u64, len: u64) -> std::io::Result<bool> {
        self.inner.punch_hole(offset, len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.gate.pass();
        self.inner.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.gate.pass();
        self.inner.sync_all()
    }
    fn start_writeback(&self) -> std::io::Result<()> {
        if self.fail_writeback {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.start_writeback()
    }
    fn try_lock_exclusive(&self) -> std::io::Result<bool> {
        self.inner.try_lock_exclusive()
    }
    fn unlock(&self) -> std::io::Result<()> {
        self.inner.unlock()
    }
    fn into_std(self: Box<Self>) -> Result<std::fs::File, Box<dyn FsFile>> {
        Err(self)
    }
}
