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
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{FileSystem, FsFile, OpenMode};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Debug, Clone, Hash)]
enum FileOp {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Hash)]
enum DirOp {
    Link {
        name: OsString,
        entry: Entry,
    },
    Rename {
        from: OsString,
        to: OsString,
        entry: Entry,
    },
    Unlink {
        name: OsString,
        entry: Entry,
    },
}

#[derive(Debug, Clone, Default, Hash)]
struct Inode {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<FileOp>,
}

#[derive(Debug, Clone, Default, Hash)]
struct Dir {
    live: BTreeMap<OsString, Entry>,
    durable: BTreeMap<OsString, Entry>,
    /// (global issue number, op).
    pending: Vec<(u64, DirOp)>,
}

#[derive(Debug)]
struct Machine {
    inodes: BTreeMap<u64, Inode>,
    next_ino: u64,
    /// Every directory ever made, by absolute path; reachable ones through their parents.
    dirs: BTreeMap<PathBuf, Dir>,
    dir_op_seq: u64,
    ops: u64,
    cut_at: Option<u64>,
    /// The op that fails with EIO (once), the machine staying up.
    fail_at: Option<u64>,
    /// The injected faults that fired, in order.
    faults: Vec<SimFault>,
    dead: bool,
    stats: SimStats,
    /// Inode → the handle holding its lock.
    locks: BTreeMap<u64, u64>,
}

/// A simulated file system (cheap to clone: clones share the machine).
#[derive(Debug, Clone)]
pub struct SimFs(Arc<Mutex<Machine>>);

static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

fn io(kind: std::io::ErrorKind, msg: &str) -> std::io::Error {
    std::io::Error::new(kind, msg.to_string())
}

fn dead() -> std::io::Error {
    io(std::io::ErrorKind::Other, "power is off")
}

/// EIO, as the kernel reports a failed write-back or device error.
fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(5)
}

/// What [`Machine::tick`] decided for an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tick {
    /// The op proceeds.
    Go,
    /// The power was cut on it: the machine is dead, the op may have happened.
    Cut,
    /// An injected EIO: the op fails without effect (a sync: see the module docs).
    Eio,
}

impl Tick {
    fn result(self) -> IoResult<()> {
        match self {
            Tick::Go => Ok(()),
            Tick::Cut => Err(io(std::io::ErrorKind::Other, "power cut")),
            Tick::Eio => Err(eio()),
        }
    }
}

/// Applies a file op to an image (a view's bytes).
fn apply_file_op(img: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write { off, data } => write_into(img, *off, data),
        FileOp::SetLen(len) => img.resize(*len as usize, 0),
    }
}

/// Applies a directory entry op to a directory's entries as the crash does: a rename or an
/// unlink acts only on the entry it named when issued.
fn apply_dir_op(entries: &mut BTreeMap<OsString, Entry>, op: &DirOp) {
    match op {
        DirOp::Link { name, entry } => {
            entries.insert(name.clone(), *entry);
        }
        DirOp::Rename { from, to, entry } => {
            if entries.get(from) == Some(entry) {
                entries.remove(from);
            }
            entries.insert(to.clone(), *entry);
        }
        DirOp::Unlink { name, entry } => {
            if entries.get(name) == Some(entry) {
                entries.remove(name);
            }
        }
    }
}

fn write_into(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off as usize..end].copy_from_slice(data);
}

/// splitmix64, for torn-write fates.
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `path` as an absolute path without `.`/`..`, split into parent and name.
fn split(path: &Path) -> IoResult<(PathBuf, OsString)> {
    let norm = normalize(path)?;
    match (norm.parent(), norm.file_name()) {
        (Some(p), Some(n)) => Ok((p.to_path_buf(), n.to_os_string())),
        _ => Err(io(std::io::ErrorKind::InvalidInput, "not a file path")),
    }
}

fn normalize(path: &Path) -> IoResult<PathBuf> {
    let mut out = PathBuf::from("/");
    if !path.is_absolute() {
        return Err(io(
            std::io::ErrorKind::InvalidInput,
            "the simulated file system takes absolute paths",
        ));
    }
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            _ => {
                return Err(io(
                    std::io::ErrorKind::InvalidInput,
                    "no `..` in simulated paths",
                ));
            }
        }
    }
    Ok(out)
}

impl Inode {
    fn crash_image(&self, fate: FileFate, ino: u64) -> Vec<u8> {
        let mut img = self.durable.clone();
        let mut seed = match fate {
            FileFate::Random(s) => s ^ ino.wrapping_mul(0xa076_1d64_78bd_642f),
            _ => 0,
        };
        for op in &self.pending {
            // 0: lost, 1: applied, 2: torn.
            let f = match fate {
                FileFate::DropAll => 0,
                FileFate::KeepAll => 1,
                FileFate::Random(_) => splitmix(&mut seed) % 3,
            };
            match (op, f) {
                (_, 0) => {}
                (FileOp::SetLen(_), _) | (FileOp::Write { .. }, 1) => apply_file_op(&mut img, op),
                (FileOp::Write { off, data }, _) => {
                    let unit = if data.len() <= SECTOR_BYTES {
                        1
                    } else {
                        SECTOR_BYTES
                    };
                    for (i, chunk) in data.chunks(unit).enumerate() {
                        if splitmix(&mut seed) % 2 == 1 {
                            write_into(&mut img, off + (i * unit) as u64, chunk);
                        }
                    }
                }
            }
        }
        img
    }
}

impl Machine {
    /// Counts a mutating op (the machine must be alive): it proceeds, or the power is cut
    /// on it (the machine dies), or it fails with an injected EIO.
    fn tick(&mut self, op: SimOp, path: &Path) -> Tick {
        debug_assert!(!self.dead, "invariant: ops tick on a live machine only");
        self.ops += 1;
        *self.stats.counts.entry(op).or_default() += 1;
        self.stats.log.push((op, path.to_path_buf()));
        if self.cut_at == Some(self.ops) {
            self.dead = true;
            return Tick::Cut;
        }
        if self.fail_at == Some(self.ops) {
            self.faults.push(SimFault {
                op_index: self.ops,
                op,
                path: path.to_path_buf(),
            });
            return Tick::Eio;
        }
        Tick::Go
    }

    fn alive(&self) -> IoResult<()> {
        if self.dead { Err(dead()) } else { Ok(()) }
    }

    fn dir_mut(&mut self, dir: &Path) -> IoResult<&mut Dir> {
        self.dirs
            .get_mut(dir)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such directory"))
    }

    fn lookup(&self, path: &Path) -> IoResult<Option<Entry>> {
        let norm = normalize(path)?;
        if norm == Path::new("/") {
            return Ok(Some(Entry::Dir));
        }
        let (parent, name) = split(&norm)?;
        Ok(self
            .dirs
            .get(&parent)
            .and_then(|d| d.live.get(&name).copied()))
    }

    /// Applies a directory op to the live view and records it as pending. If the power is
    /// cut on it, it is recorded all the same (the crash may have done it) and fails; an
    /// injected EIO fails it without effect.
    fn dir_op(&mut self, kind: SimOp, dir: &Path, op: DirOp) -> IoResult<()> {
        self.alive()?;
        let name = match &op {
            DirOp::Link { name, .. } | DirOp::Unlink { name, .. } => name,
            DirOp::Rename { to, .. } => to,
        };
        let tick = self.tick(kind, &dir.join(name));
        if tick == Tick::Eio {
            return tick.result();
        }
        // From here an error is the cut on this very op.
        self.dir_op_seq += 1;
        let seq = self.dir_op_seq;
        let d = self.dir_mut(dir)?;
        if tick == Tick::Go {
            match &op {
                DirOp::Link { name, entry } => {
                    d.live.insert(name.clone(), *entry);
                }
                DirOp::Rename { from, to, entry } => {
                    d.live.remove(from);
                    d.live.insert(to.clone(), *entry);
                }
                DirOp::Unlink { name, .. } => {
                    d.live.remove(name);
                }
            }
        }
        d.pending.push((seq, op));
        tick.result()
    }

    /// Applies a file op to the live view and records it as pending; cut and EIO as
    /// [`Machine::dir_op`].
    fn file_op(&mut self, kind: SimOp, path: &Path, ino: u64, op: FileOp) -> IoResult<()> {
        self.alive()?;
        let tick = self.tick(kind, path);
        if tick == Tick::Eio {
            return tick.result();
        }
        // From here an error is the cut on this very op.
        let inode = self
            .inodes
            .get_mut(&ino)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?;
        if tick == Tick::Go {
            apply_file_op(&mut inode.live, &op);
        }
        inode.pending.push(op);
        tick.result()
    }
}

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

impl FileSystem for SimFs {
    fn create_dir_all(&self, dir: &Path) -> IoResult<()> {
        let norm = normalize(dir)?;
        let mut m = self.lock();
        m.alive()?;
        let mut at = PathBuf::from("/");
        for c in norm.components().skip(1) {
            let name = c.as_os_str().to_os_string();
            let child = at.join(&name);
            match m.lookup(&child)? {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => {
                    return Err(io(
                        std::io::ErrorKind::AlreadyExists,
                        "a file is in the way",
                    ));
                }
                None => {
                    // The directory exists (empty) from the op on, whether its entry
                    // survives a crash or not.
                    m.dirs.entry(child.clone()).or_default();
                    m.dir_op(
                        SimOp::Mkdir,
                        &at,
                        DirOp::Link {
                            name,
                            entry: Entry::Dir,
                        },
                    )?;
                }
            }
            at = child;
        }
        Ok(())
    }

    fn open_file(&self, path: &Path, mode: OpenMode) -> IoResult<Box<dyn FsFile>> {
        let (parent, name) = split(path)?;
        let full = parent.join(&name);
        let mut m = self.lock();
        m.alive()?;
        if !m.dirs.contains_key(&parent) || m.lookup(&parent)? != Some(Entry::Dir) {
            return Err(io(std::io::ErrorKind::NotFound, "no such directory"));
        }
        let ino = match (m.lookup(&full)?, mode) {
            (Some(Entry::Dir), _) => {
                return Err(io(std::io::ErrorKind::IsADirectory, "is a directory"));
            }
            (Some(Entry::File(ino)), OpenMode::CreateTruncate) => {
                m.file_op(SimOp::SetLen, &full, ino, FileOp::SetLen(0))?;
                ino
            }
            (Some(Entry::File(ino)), _) => ino,
            (None, OpenMode::Existing | OpenMode::ReadOnly) => {
                return Err(io(std::io::ErrorKind::NotFound, "no such file"));
            }
            (None, _) => {
                let ino = m.next_ino;
                m.next_ino += 1;
                m.inodes.insert(ino, Inode::default());
                m.dir_op(
                    SimOp::Create,
                    &parent,
                    DirOp::Link {
                        name,
                        entry: Entry::File(ino),
                    },
                )?;
                ino
            }
        };
        Ok(Box::new(SimFile {
            fs: self.clone(),
            path: full,
            ino,
            handle: NEXT_HANDLE.fetch_add(1, Ordering::Relaxed),
            read_only: mode == OpenMode::ReadOnly,
        }))
    }

    fn exists(&self, path: &Path) -> IoResult<bool> {
        let m = self.lock();
        m.alive()?;
        Ok(m.lookup(path)?.is_some())
    }

    fn rename(&self, from: &Path, to: &Path) -> IoResult<()> {
        let (pf, nf) = split(from)?;
        let (pt, nt) = split(to)?;
        if pf != pt {
            return Err(io(
                std::io::ErrorKind::Unsupported,
                "the simulated file system renames within one directory only",
            ));
        }
        let mut m = self.lock();
        m.alive()?;
        let entry = m
            .lookup(from)?
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?;
        m.dir_op(
            SimOp::Rename,
            &pf,
            DirOp::Rename {
                from: nf,
                to: nt,
                entry,
            },
        )
    }

    fn remove_file(&self, path: &Path) -> IoResult<()> {
        let (parent, name) = split(path)?;
        let mut m = self.lock();
        m.alive()?;
        match m.lookup(path)? {
            None => Err(io(std::io::ErrorKind::NotFound, "no such file")),
            Some(Entry::Dir) => Err(io(std::io::ErrorKind::IsADirectory, "is a directory")),
            Some(entry) => m.dir_op(SimOp::Unlink, &parent, DirOp::Unlink { name, entry }),
        }
    }

    fn sync_dir(&self, dir: &Path) -> IoResult<()> {
        let norm = normalize(dir)?;
        let mut m = self.lock();
        m.alive()?;
        if m.lookup(&norm)? != Some(Entry::Dir) {
            return Err(io(std::io::ErrorKind::NotFound, "no such directory"));
        }
        let tick = m.tick(SimOp::SyncDir, &norm);
        let d = m.dir_mut(&norm)?;
        match tick {
            Tick::Go => {
                // The pending ops, not the live view: ops lost to a failed sync stay lost.
                let pending = std::mem::take(&mut d.pending);
                pending
                    .iter()
                    .for_each(|(_, op)| apply_dir_op(&mut d.durable, op));
            }
            // A failed sync: its pending ops are never made durable (module docs).
            Tick::Eio => d.pending.clear(),
            Tick::Cut => {}
        }
        tick.result()
    }

    fn allocated_bytes(&self, path: &Path) -> IoResult<u64> {
        let m = self.lock();
        m.alive()?;
        match m.lookup(path)? {
            Some(Entry::File(ino)) => Ok(m.inodes[&ino].live.len() as u64),
            _ => Err(io(std::io::ErrorKind::NotFound, "no such file")),
        }
    }

    fn list_dir(&self, dir: &Path) -> IoResult<Vec<OsString>> {
        let norm = normalize(dir)?;
        let m = self.lock();
        m.alive()?;
        match m.dirs.get(&norm) {
            Some(d) if m.lookup(&norm)? == Some(Entry::Dir) => Ok(d.live.keys().cloned().collect()),
            _ => Err(io(std::io::ErrorKind::NotFound, "no such directory")),
        }
    }
}

/// An open file of a [`SimFs`].
#[derive(Debug)]
pub struct SimFile {
    fs: SimFs,
    path: PathBuf,
    ino: u64,
    handle: u64,
    /// Opened [`OpenMode::ReadOnly`]: writes fail with `PermissionDenied` (`EBADF` on a
    /// real file), so a layer that must not write cannot do so unnoticed.
    read_only: bool,
}

impl SimFile {
    fn writable(&self) -> IoResult<()> {
        if self.read_only {
            return Err(io(
                std::io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ));
        }
        Ok(())
    }

    fn sync(&self, kind: SimOp) -> IoResult<()> {
        let mut m = self.fs.lock();
        m.alive()?;
        let tick = m.tick(kind, &self.path);
        let i = m
            .inodes
            .get_mut(&self.ino)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?;
        match tick {
            Tick::Go => {
                // The pending ops, not the live view: ops lost to a failed sync stay lost.
                let pending = std::mem::take(&mut i.pending);
                pending
                    .iter()
                    .for_each(|op| apply_file_op(&mut i.durable, op));
            }
            // A failed sync: its pending ops are never made durable (module docs).
            Tick::Eio => i.pending.clear(),
            Tick::Cut => {}
        }
        tick.result()
    }
}

impl FsFile for SimFile {
    fn len(&self) -> IoResult<u64> {
        let m = self.fs.lock();
        m.alive()?;
        Ok(m.inodes[&self.ino].live.len() as u64)
    }
    fn read_at(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        let m = self.fs.lock();
        m.alive()?;
        let live = &m.inodes[&self.ino].live;
        let end = offset as usize + out.len();
        if end > live.len() {
            return Err(io(std::io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        out.copy_from_slice(&live[offset as usize..end]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        self.writable()?;
        let op = FileOp::Write {
            off: offset,
            data: data.to_vec(),
        };
        self.fs
            .lock()
            .file_op(SimOp::Write, &self.path, self.ino, op)
    }
    /// One write of the pieces' concatenation: one operation a cut can interrupt or lose,
    /// as one `pwritev` is.
    fn write_vectored_at(&self, offset: u64, pieces: &[std::io::IoSlice<'_>]) -> IoResult<()> {
        let whole: Vec<u8> = pieces.iter().flat_map(|p| p.iter().copied()).collect();
        self.write_at(offset, &whole)
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        self.writable()?;
        self.fs
            .lock()
            .file_op(SimOp::SetLen, &self.path, self.ino, FileOp::SetLen(len))
    }
    /// A write of zeros within the file (one operation a cut can interrupt or lose), never
    /// past its end: the length is kept.
    fn punch_hole(&self, offset: u64, len: u64) -> IoResult<bool> {
        self.writable()?;
        let mut m = self.fs.lock();
        m.alive()?;
        let file_len = m
            .inodes
            .get(&self.ino)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such file"))?
            .live
            .len() as u64;
        let end = offset.saturating_add(len).min(file_len);
        if end <= offset {
            return Ok(true);
        }
        let op = FileOp::Write {
            off: offset,
            data: vec![0; (end - offset) as usize],
        };
        m.file_op(SimOp::Write, &self.path, self.ino, op)?;
        Ok(true)
    }
    fn sync_data(&self) -> IoResult<()> {
        self.sync(SimOp::SyncData)
    }
    fn sync_all(&self) -> IoResult<()> {
        self.sync(SimOp::SyncAll)
    }
    fn try_lock_exclusive(&self) -> IoResult<bool> {
        let mut m = self.fs.lock();
        m.alive()?;
        match m.locks.get(&self.ino) {
            Some(h) if *h != self.handle => Ok(false),
            _ => {
                m.locks.insert(self.ino, self.handle);
                Ok(true)
            }
        }
    }
    fn unlock(&self) -> IoResult<()> {
        let mut m = self.fs.lock();
        if m.locks.get(&self.ino) == Some(&self.handle) {
            m.locks.remove(&self.ino);
        }
        Ok(())
    }
    fn into_std(self: Box<Self>) -> Result<std::fs::File, Box<dyn FsFile>> {
        Err(self)
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        // Closing the handle releases its lock (as `flock` does).
        let _ = self.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    #[test]
    fn unsynced_directory_ops_are_lost_and_synced_ones_kept() {
        let fs = SimFs::new();
        fs.create_dir_all(p("/h")).unwrap();
        fs.sync_dir(p("/")).unwrap();
        let f = fs
            .open_file(p("/h/a.tmp"), OpenMode::CreateTruncate)
            .unwrap();
        f.write_at(0, b"data").unwrap();
        f.sync_all().unwrap();
        fs.rename(p("/h/a.tmp"), p("/h/a")).unwrap();
        assert_eq!(fs.pending_dir_ops(), 2);
        let lost = fs.crash_image(DirFate::DropAll, FileFate::KeepAll);
        assert_eq!(lost.list(p("/h")), Vec::<String>::new());
        let kept = fs.crash_image(DirFate::KeepAll, FileFate::DropAll);
        assert_eq!(kept.list(p("/h")), ["a"]);
        assert_eq!(kept.read(p("/h/a")).unwrap(), b"data");
        // The rename alone (its create lost) still links the synced file.
        let rename_only = fs.crash_image(DirFate::Mask(0b10), FileFate::DropAll);
        assert_eq!(rename_only.list(p("/h")), ["a"]);
        // The create alone: the temporary name.
        let create_only = fs.crash_image(DirFate::Prefix(1), FileFate::DropAll);
        assert_eq!(create_only.list(p("/h")), ["a.tmp"]);
        fs.sync_dir(p("/h")).unwrap();
        let synced = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
        assert_eq!(synced.read(p("/h/a")).unwrap(), b"data");
    }

    #[test]
    fn unsynced_file_bytes_are_lost_and_a_lost_mkdir_loses_the_subtree() {
        let fs = SimFs::new();
        fs.create_dir_all(p("/h/sub")).unwrap();
        fs.sync_dir(p("/")).unwrap();
        fs.sync_dir(p("/h")).unwrap();
        let f = fs.open_file(p("/h/sub/x"), OpenMode::CreateOrOpen).unwrap();
        fs.sync_dir(p("/h/sub")).unwrap();
        f.write_at(0, &[7; 1024]).unwrap();
        let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
        assert_eq!(img.read(p("/h/sub/x")).unwrap(), Vec::<u8>::new());
        let img = fs.crash_image(DirFate::DropAll, FileFate::KeepAll);
        assert_eq!(img.read(p("/h/sub/x")).unwrap(), vec![7; 1024]);
        let fs2 = SimFs::new();
        fs2.create_dir_all(p("/h")).unwrap();
        let f = fs2.open_file(p("/h/x"), OpenMode::CreateOrOpen).unwrap();
        fs2.sync_dir(p("/h")).unwrap();
        f.sync_all().unwrap();
        // `/h` itself was never synced into `/`: losing it loses `/h/x`.
        let img = fs2.crash_image(DirFate::DropAll, FileFate::KeepAll);
        assert!(!img.exists(p("/h")).unwrap());
    }

    #[test]
    fn the_cut_op_and_every_later_one_fail() {
        let fs = SimFs::new();
        fs.set_cut_at(Some(2));
        let f = fs.open_file(p("/a"), OpenMode::CreateOrOpen).unwrap();
        assert!(f.write_at(0, b"x").is_err());
        assert!(fs.is_dead());
        assert!(f.len().is_err());
        assert!(fs.sync_dir(p("/")).is_err());
        assert_eq!(fs.ops(), 2);
        // The write in flight may have landed.
        let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        assert_eq!(img.read(p("/a")).unwrap(), b"x");
    }

    #[test]
    fn an_injected_eio_fails_one_op_and_the_machine_stays_up() {
        let fs = SimFs::new();
        let f = fs.open_file(p("/a"), OpenMode::CreateOrOpen).unwrap(); // op 1
        fs.sync_dir(p("/")).unwrap(); // op 2
        fs.set_fail_at(Some(3));
        let e = f.write_at(0, b"lost").unwrap_err(); // op 3: fails
        assert_eq!(e.raw_os_error(), Some(5), "EIO: {e}");
        assert!(!fs.is_dead());
        // A failed write wrote nothing: not in the live view, nothing pending.
        assert_eq!(fs.read(p("/a")).unwrap(), b"");
        assert_eq!(fs.pending_file_ops(), 0);
        f.write_at(0, b"kept").unwrap(); // op 4: works
        f.sync_data().unwrap();
        assert_eq!(
            fs.faults(),
            [SimFault {
                op_index: 3,
                op: SimOp::Write,
                path: PathBuf::from("/a"),
            }]
        );
        assert_eq!(fs.stats().log[2], (SimOp::Write, PathBuf::from("/a")));
        let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
        assert_eq!(img.read(p("/a")).unwrap(), b"kept");
        // A failed directory op does nothing either.
        fs.set_fail_at(Some(fs.ops() + 1));
        assert!(fs.rename(p("/a"), p("/b")).is_err());
        assert_eq!(fs.list(p("/")), ["a"]);
        assert_eq!(fs.pending_dir_ops(), 0);
        assert_eq!(fs.faults().len(), 2);
    }

    #[test]
    fn a_retried_sync_after_a_failed_one_does_not_make_the_lost_writes_durable() {
        for kind in [SimOp::SyncData, SimOp::SyncAll] {
            let fs = SimFs::new();
            let f = fs.open_file(p("/seg"), OpenMode::CreateOrOpen).unwrap();
            fs.sync_dir(p("/")).unwrap();
            f.write_at(0, b"aaaa").unwrap();
            f.sync_data().unwrap();
            f.write_at(4, b"bbbb").unwrap();
            fs.set_fail_at(Some(fs.ops() + 1));
            let sync = |f: &dyn FsFile| match kind {
                SimOp::SyncData => f.sync_data(),
                _ => f.sync_all(),
            };
            assert_eq!(sync(&*f).unwrap_err().raw_os_error(), Some(5));
            assert_eq!(fs.faults().len(), 1, "{kind:?}: the fault fired once");
            // Reads still see the lost bytes (the page cache kept them)...
            assert_eq!(fs.read(p("/seg")).unwrap(), b"aaaabbbb");
            // ...and the retry "succeeds".
            sync(&*f).unwrap();
            f.write_at(8, b"cccc").unwrap();
            sync(&*f).unwrap();
            for (dirs, files) in [
                (DirFate::DropAll, FileFate::DropAll),
                (DirFate::KeepAll, FileFate::KeepAll),
                (DirFate::KeepAll, FileFate::Random(7)),
            ] {
                // The lost bytes never reach the disk; those written after the failure do.
                let img = fs.crash_image(dirs, files);
                assert_eq!(
                    img.read(p("/seg")).unwrap(),
                    b"aaaa\0\0\0\0cccc",
                    "{kind:?} {files:?}"
                );
            }
        }
    }

    #[test]
    fn a_failed_sync_dir_loses_its_pending_entries_for_good() {
        let fs = SimFs::new();
        fs.create_dir_all(p("/h")).unwrap();
        fs.sync_dir(p("/")).unwrap();
        let f = fs.open_file(p("/h/a"), OpenMode::CreateOrOpen).unwrap();
        f.sync_all().unwrap();
        fs.set_fail_at(Some(fs.ops() + 1));
        assert!(fs.sync_dir(p("/h")).is_err());
        assert_eq!(fs.list(p("/h")), ["a"], "reads still see the entry");
        drop(fs.open_file(p("/h/b"), OpenMode::CreateOrOpen).unwrap());
        fs.sync_dir(p("/h")).unwrap();
        // `b`, created after the failure, is durable; `a` is not, the retry notwithstanding.
        let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
        assert_eq!(img.list(p("/h")), ["b"]);
    }

    #[test]
    fn without_faults_a_sync_makes_the_live_view_durable() {
        // The pending-op replay a sync now does equals the live view when nothing was lost.
        let fs = SimFs::new();
        let f = fs.open_file(p("/x"), OpenMode::CreateOrOpen).unwrap();
        f.write_at(0, &[1; 700]).unwrap();
        f.set_len(300).unwrap();
        f.write_at(600, b"tail").unwrap();
        f.sync_data().unwrap();
        fs.rename(p("/x"), p("/y")).unwrap();
        drop(fs.open_file(p("/z"), OpenMode::CreateOrOpen).unwrap());
        fs.remove_file(p("/z")).unwrap();
        fs.sync_dir(p("/")).unwrap();
        let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
        assert_eq!(img.fingerprint(), fs.fingerprint());
        assert_eq!(img.list(p("/")), ["y"]);
        assert!(fs.faults().is_empty());
    }

    #[test]
    fn a_lock_excludes_other_handles_until_dropped() {
        let fs = SimFs::new();
        let a = fs.open_file(p("/LOCK"), OpenMode::CreateOrOpen).unwrap();
        let b = fs.open_file(p("/LOCK"), OpenMode::CreateOrOpen).unwrap();
        assert!(a.try_lock_exclusive().unwrap());
        assert!(!b.try_lock_exclusive().unwrap());
        drop(a);
        assert!(b.try_lock_exclusive().unwrap());
    }
}
