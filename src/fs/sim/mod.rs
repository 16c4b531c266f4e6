//! A simulated file system for power-cut tests: files and directories, each with a *live*
//! view (what reads see: the page cache) and a *durable* one (what survives a power cut),
//! plus the operations issued since their last sync.
//!
//! * One power source: every mutating operation — create (a file, or a directory level),
//!   `write_at`, `set_len` (including the truncation of `OpenMode::CreateTruncate`),
//!   `sync_data`, `sync_all`, `rename`, `remove_file`, `sync_dir` — is counted; with
//!   `cut_at = k` the k-th fails and the machine dies: that op and every later one, reads
//!   included, fail, so no `Drop` can tidy up. The op in flight (a write, a truncate, a
//!   directory op) is kept among the pending ops: the crash may have done it.
//! * A file's pending writes and length changes become durable at its `sync_data` or
//!   `sync_all`. A directory's pending entry ops (create, mkdir, rename, unlink) become
//!   durable at its `sync_dir` only — never at a file's sync.
//! * [`SimFs::crash_image`] is the machine after the cut. Files: the durable bytes with each
//!   pending op dropped, applied or torn per [`FileFate`] (torn per 512-byte sector; per byte
//!   for writes of at most one sector). Directories: the durable entries with each pending
//!   entry op independently kept or lost per [`DirFate`]; kept ops apply in the order they
//!   were issued, and each acts on the file it named when issued (a kept rename links that
//!   file under its new name even if the op that created it was lost — the harshest reading
//!   of POSIX, harsher than ext4's ordered journal, which keeps a prefix: [`DirFate::Prefix`]
//!   models that). A lost `mkdir` loses the directory and everything in it. Files no
//!   longer named anywhere are gone. The image has no open handles and no locks.
//! * I/O errors, apart from the power: with `fail_at = k` ([`SimFs::set_fail_at`]) the k-th
//!   mutating operation (the same count as `cut_at`) returns EIO (raw OS error 5) once; the
//!   machine stays up and later operations work. What the failed operation did, per kind:
//!   - `write_at`, `set_len`, create, mkdir, rename, unlink: nothing (no prefix of a write
//!     lands; the live view is unchanged, nothing is pending);
//!   - `sync_data`, `sync_all` of a file: the file's pending ops are **never** made durable
//!     — dropped from its pending list while reads still see them (Linux keeps the pages
//!     in the page cache but marks them clean after a failed write-back: "fsyncgate"). A
//!     later successful sync makes durable only the ops issued after the failure, so a
//!     crash image after a retried sync still lacks the lost ones: the harshest reading
//!     (on Linux a later write to the same page can carry them out again);
//!   - `sync_dir`: likewise for the directory's pending entry ops.
//!
//!   Each fired fault is recorded ([`SimFs::faults`]) with its op and path, so a test can
//!   prove it fired and count what was issued after it (`stats().log` from its index).
//!
//! Invariant: nothing here reads a clock or a global RNG: a crash image is a pure function of
//! the operations issued and the fates passed.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileSystem, FsFile, OpenMode};
use machine::*;

mod file;
mod fs_impl;
mod machine;
#[cfg(test)]
mod tests;

pub use file::SimFile;

type IoResult<T> = std::io::Result<T>;

/// Size of the unit a torn write lands in (or not): one disk sector.
pub const SECTOR_BYTES: usize = 512;

/// The kinds of operation a power cut can interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum SimOp {
    /// A new file (a directory entry in its parent).
    Create,
    /// A new directory (a directory entry in its parent).
    Mkdir,
    /// `write_at`.
    Write,
    /// `set_len`, or the truncation of an existing file opened with `CreateTruncate`.
    SetLen,
    /// A file's `sync_data`.
    SyncData,
    /// A file's `sync_all`.
    SyncAll,
    /// `rename`.
    Rename,
    /// `remove_file`.
    Unlink,
    /// `sync_dir`.
    SyncDir,
}

/// How many operations of each kind were issued, and the order they came in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Operations per kind.
    pub counts: BTreeMap<SimOp, u64>,
    /// Every operation, in order, with the path it acted on (a rename: the new name).
    pub log: Vec<(SimOp, PathBuf)>,
}

/// One injected I/O error that fired (see [`SimFs::set_fail_at`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFault {
    /// The failed operation's number (1-based, as counted by [`SimFs::ops`]); it is entry
    /// `op_index - 1` of [`SimStats::log`].
    pub op_index: u64,
    /// Its kind.
    pub op: SimOp,
    /// The path it acted on.
    pub path: PathBuf,
}

/// What a crash does with the files' unsynced writes and length changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileFate {
    /// Every unsynced file op is lost.
    DropAll,
    /// Every unsynced file op reached the disk.
    KeepAll,
    /// Each dropped, applied or torn, from this seed (one stream per file, derived from the
    /// seed and the file's number).
    Random(u64),
}

/// What a crash does with the directories' unsynced entry ops, numbered across all
/// directories in the order they were issued (see [`SimFs::pending_dir_ops`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DirFate {
    /// Every unsynced entry op is lost.
    DropAll,
    /// Every unsynced entry op is kept.
    KeepAll,
    /// The first `n` are kept, the rest lost (an ordered metadata journal).
    Prefix(usize),
    /// Op `i` is kept when bit `i` is set (ops past 63 are lost).
    Mask(u64),
}

/// A simulated file system (cheap to clone: clones share the machine).
#[derive(Debug, Clone)]
pub struct SimFs(Arc<Mutex<Machine>>);

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

impl Default for SimFs {
    fn default() -> Self {
        Self::new()
    }
}

impl SimFs {
    /// An empty file system: the root directory only, durable.
    pub fn new() -> SimFs {
        let mut dirs = BTreeMap::new();
        dirs.insert(PathBuf::from("/"), Dir::default());
        SimFs(Arc::new(Mutex::new(Machine {
            inodes: BTreeMap::new(),
            next_ino: 1,
            dirs,
            dir_op_seq: 0,
            ops: 0,
            cut_at: None,
            fail_at: None,
            faults: Vec::new(),
            dead: false,
            stats: SimStats::default(),
            locks: BTreeMap::new(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Machine> {
        // A test that panicked while holding the machine must not hide its own failure.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cuts the power at the `k`-th mutating operation from the machine's start (1-based;
    /// `None`: never).
    pub fn set_cut_at(&self, k: Option<u64>) {
        self.lock().cut_at = k;
    }

    /// Makes the `k`-th mutating operation from the machine's start (1-based, counted as
    /// for [`SimFs::set_cut_at`]; `None`: none) fail with EIO, once, the machine staying up;
    /// see the module docs for what each failed operation leaves.
    pub fn set_fail_at(&self, k: Option<u64>) {
        self.lock().fail_at = k;
    }

    /// The injected EIO faults that fired so far, in order.
    pub fn faults(&self) -> Vec<SimFault> {
        self.lock().faults.clone()
    }

    /// Mutating operations issued so far (the one the power was cut on included).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// True once the power was cut.
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }

    /// The operations issued so far, per kind and in order.
    pub fn stats(&self) -> SimStats {
        self.lock().stats.clone()
    }

    /// Directory entry ops not yet made durable by a `sync_dir`, across all directories.
    pub fn pending_dir_ops(&self) -> usize {
        self.lock().dirs.values().map(|d| d.pending.len()).sum()
    }

    /// File ops (writes, length changes) not yet made durable, across all files.
    pub fn pending_file_ops(&self) -> usize {
        self.lock().inodes.values().map(|i| i.pending.len()).sum()
    }

    /// The names in `dir`, as reads see them, sorted.
    pub fn list(&self, dir: &Path) -> Vec<String> {
        let m = self.lock();
        normalize(dir)
            .ok()
            .and_then(|d| m.dirs.get(&d))
            .map(|d| {
                d.live
                    .keys()
                    .map(|n| n.to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The bytes of the file at `path`, as reads see them.
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let m = self.lock();
        match m.lookup(path).ok()?? {
            Entry::File(ino) => Some(m.inodes[&ino].live.clone()),
            Entry::Dir => None,
        }
    }

    /// A hash of everything a crash image holds (names, bytes); equal images hash equal.
    pub fn fingerprint(&self) -> u64 {
        let m = self.lock();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (path, d) in &m.dirs {
            path.hash(&mut h);
            for (name, e) in &d.live {
                name.hash(&mut h);
                match e {
                    Entry::Dir => 0u8.hash(&mut h),
                    Entry::File(ino) => m.inodes[ino].live.hash(&mut h),
                }
            }
        }
        h.finish()
    }

    /// The file system a power cut leaves, with the unsynced ops' fates given: a new,
    /// powered machine whose live and durable views are the image.
    pub fn crash_image(&self, dirs: DirFate, files: FileFate) -> SimFs {
        let m = self.lock();
        // Number pending entry ops globally in issue order; decide each one's fate.
        let mut seqs: Vec<u64> = m
            .dirs
            .values()
            .flat_map(|d| d.pending.iter().map(|(s, _)| *s))
            .collect();
        seqs.sort_unstable();
        let kept: BTreeSet<u64> = seqs
            .iter()
            .enumerate()
            .filter(|(i, _)| match dirs {
                DirFate::DropAll => false,
                DirFate::KeepAll => true,
                DirFate::Prefix(n) => *i < n,
                DirFate::Mask(bits) => *i < 64 && bits >> i & 1 == 1,
            })
            .map(|(_, s)| *s)
            .collect();
        let mut entries: BTreeMap<PathBuf, BTreeMap<OsString, Entry>> = BTreeMap::new();
        for (path, d) in &m.dirs {
            let mut e = d.durable.clone();
            for (seq, op) in &d.pending {
                if kept.contains(seq) {
                    apply_dir_op(&mut e, op);
                }
            }
            entries.insert(path.clone(), e);
        }
        // Walk from the root: only what is reachable survives.
        let mut out_dirs = BTreeMap::new();
        let mut out_inodes = BTreeMap::new();
        let mut stack = vec![PathBuf::from("/")];
        while let Some(path) = stack.pop() {
            let e = entries.remove(&path).unwrap_or_default();
            for (name, entry) in &e {
                match entry {
                    Entry::Dir => stack.push(path.join(name)),
                    Entry::File(ino) => {
                        let img = m.inodes[ino].crash_image(files, *ino);
                        out_inodes.entry(*ino).or_insert(Inode {
                            live: img.clone(),
                            durable: img,
                            pending: Vec::new(),
                        });
                    }
                }
            }
            out_dirs.insert(
                path,
                Dir {
                    live: e.clone(),
                    durable: e,
                    pending: Vec::new(),
                },
            );
        }
        SimFs(Arc::new(Mutex::new(Machine {
            inodes: out_inodes,
            next_ino: m.next_ino,
            dirs: out_dirs,
            dir_op_seq: 0,
            ops: 0,
            cut_at: None,
            fail_at: None,
            faults: Vec::new(),
            dead: false,
            stats: SimStats::default(),
            locks: BTreeMap::new(),
        })))
    }
}
