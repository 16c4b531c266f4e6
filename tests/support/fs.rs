//! A `SimFs` with hooks, for tests that need file operations to fail, to wait or to lie:
//! an open that fails, an unlink that is refused or that takes effect and then reports the
//! file gone, a writeback start that fails, `sync_data` calls held until the test lets them
//! go or dropped (a disk that loses them); every rename is recorded with the file ops the
//! machine still had unsynced.
//!
//! Invariant: every call the hooks do not name goes to the `SimFs` unchanged.

use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use flushpoint::fs::{FileSystem, FsFile, OpenMode};
use flushpoint::testing::SimFs;

/// What a [`HookedFs`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hook {
    /// Opening the file fails with `EIO`.
    FailOpen(PathBuf),
    /// Removing the file removes it, then reports `NotFound` (an unlink that took effect
    /// and returned an error, or a file another hand deleted).
    RemoveGone(PathBuf),
    /// Removing any file fails with `PermissionDenied`, removing nothing.
    DenyRemove,
    /// `sync_data` and `sync_all` on files opened under this directory wait while the
    /// [`SyncGate`] is closed.
    HoldSyncsUnder(PathBuf),
    /// `start_writeback` on files opened under this directory fails with `EIO` (a write
    /// error the kernel reports when asked to write back).
    FailWritebackUnder(PathBuf),
    /// `sync_data` on files whose name ends with this returns `Ok` and syncs nothing (a
    /// disk that loses the syncs of that file); counted in [`HookedFs::lost_syncs`].
    LoseSyncDataOf(&'static str),
    /// Every `sync_data` and `sync_all` sleeps this long first (a disk whose syncs take
    /// time, so that other threads run meanwhile).
    SlowSyncs(Duration),
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

/// A `SimFs` with [`Hook`]s.
#[derive(Debug, Clone)]
pub struct HookedFs {
    pub inner: SimFs,
    pub hooks: Vec<Hook>,
    /// The gate of [`Hook::HoldSyncsUnder`] (closed at first).
    pub gate: Arc<SyncGate>,
    /// Every rename, with the file ops the machine had unsynced when it came.
    pub renames: Arc<Mutex<Vec<(PathBuf, usize)>>>,
    /// `sync_data` calls [`Hook::LoseSyncDataOf`] dropped.
    pub lost_syncs: Arc<AtomicU64>,
}

impl HookedFs {
    /// `inner` with one hook.
    pub fn new(inner: SimFs, hook: Hook) -> HookedFs {
        HookedFs::with(inner, vec![hook])
    }

    /// `inner` with `hooks` (none: the `SimFs` as it is, renames recorded).
    pub fn with(inner: SimFs, hooks: Vec<Hook>) -> HookedFs {
        HookedFs {
            inner,
            hooks,
            gate: SyncGate::closed(),
            renames: Arc::default(),
            lost_syncs: Arc::default(),
        }
    }

    fn has(&self, hook: impl Fn(&Hook) -> bool) -> bool {
        self.hooks.iter().any(hook)
    }
}

impl FileSystem for HookedFs {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn open_file(&self, path: &Path, mode: OpenMode) -> std::io::Result<Box<dyn FsFile>> {
        if self.has(|h| matches!(h, Hook::FailOpen(at) if at == path)) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        let name = path.to_string_lossy();
        Ok(Box::new(HookedFile {
            inner: self.inner.open_file(path, mode)?,
            gate: self
                .has(|h| matches!(h, Hook::HoldSyncsUnder(dir) if path.starts_with(dir)))
                .then(|| self.gate.clone()),
            fail_writeback: self
                .has(|h| matches!(h, Hook::FailWritebackUnder(dir) if path.starts_with(dir))),
            lose_sync_data: self
                .has(|h| matches!(h, Hook::LoseSyncDataOf(suffix) if name.ends_with(suffix))),
            lost_syncs: self.lost_syncs.clone(),
            slow_syncs: self.hooks.iter().find_map(|h| match h {
                Hook::SlowSyncs(d) => Some(*d),
                _ => None,
            }),
        }))
    }
    fn exists(&self, path: &Path) -> std::io::Result<bool> {
        self.inner.exists(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        let pending = self.inner.pending_file_ops();
        self.renames
            .lock()
            .expect("renames lock")
            .push((from.to_path_buf(), pending));
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        if self.has(|h| *h == Hook::DenyRemove) {
            return Err(std::io::ErrorKind::PermissionDenied.into());
        }
        if self.has(|h| matches!(h, Hook::RemoveGone(at) if at == path)) {
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

/// A file under the hooks its path met when it was opened.
#[derive(Debug)]
struct HookedFile {
    inner: Box<dyn FsFile>,
    /// Its syncs pass this first.
    gate: Option<Arc<SyncGate>>,
    fail_writeback: bool,
    lose_sync_data: bool,
    lost_syncs: Arc<AtomicU64>,
    slow_syncs: Option<Duration>,
}

impl HookedFile {
    fn before_sync(&self) {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        if let Some(d) = self.slow_syncs {
            std::thread::sleep(d);
        }
    }
}

impl FsFile for HookedFile {
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
        self.before_sync();
        if self.lose_sync_data {
            self.lost_syncs.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.before_sync();
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
