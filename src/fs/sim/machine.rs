//! The simulated machine's state: inodes and directories with their live and durable views
//! and pending ops, the op counter that the power cut and injected faults key on, and the
//! crash image's rules for pending ops.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use super::{FileFate, SECTOR_BYTES, SimFault, SimOp, SimStats};
use crate::rng::splitmix64_next;

type IoResult<T> = std::io::Result<T>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Entry {
    File(u64),
    Dir,
}

#[derive(Debug, Clone, Hash)]
pub(super) enum FileOp {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Clone, Hash)]
pub(super) enum DirOp {
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
pub(super) struct Inode {
    pub(super) live: Vec<u8>,
    pub(super) durable: Vec<u8>,
    pub(super) pending: Vec<FileOp>,
}

#[derive(Debug, Clone, Default, Hash)]
pub(super) struct Dir {
    pub(super) live: BTreeMap<OsString, Entry>,
    pub(super) durable: BTreeMap<OsString, Entry>,
    /// (global issue number, op).
    pub(super) pending: Vec<(u64, DirOp)>,
}

#[derive(Debug)]
pub(super) struct Machine {
    pub(super) inodes: BTreeMap<u64, Inode>,
    pub(super) next_ino: u64,
    /// Every directory ever made, by absolute path; reachable ones through their parents.
    pub(super) dirs: BTreeMap<PathBuf, Dir>,
    pub(super) dir_op_seq: u64,
    pub(super) ops: u64,
    pub(super) cut_at: Option<u64>,
    /// The op that fails with EIO (once), the machine staying up.
    pub(super) fail_at: Option<u64>,
    /// The injected faults that fired, in order.
    pub(super) faults: Vec<SimFault>,
    pub(super) dead: bool,
    pub(super) stats: SimStats,
    /// Inode → the handle holding its lock.
    pub(super) locks: BTreeMap<u64, u64>,
}
pub(super) fn io(kind: std::io::ErrorKind, msg: &str) -> std::io::Error {
    std::io::Error::new(kind, msg.to_string())
}

pub(super) fn dead() -> std::io::Error {
    io(std::io::ErrorKind::Other, "power is off")
}

/// EIO, as the kernel reports a failed write-back or device error.
pub(super) fn eio() -> std::io::Error {
    std::io::Error::from_raw_os_error(5)
}

/// What [`Machine::tick`] decided for an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tick {
    /// The op proceeds.
    Go,
    /// The power was cut on it: the machine is dead, the op may have happened.
    Cut,
    /// An injected EIO: the op fails without effect (a sync: see the module docs).
    Eio,
}

impl Tick {
    pub(super) fn result(self) -> IoResult<()> {
        match self {
            Tick::Go => Ok(()),
            Tick::Cut => Err(io(std::io::ErrorKind::Other, "power cut")),
            Tick::Eio => Err(eio()),
        }
    }
}

/// Applies a file op to an image (a view's bytes).
pub(super) fn apply_file_op(img: &mut Vec<u8>, op: &FileOp) {
    match op {
        FileOp::Write { off, data } => write_into(img, *off, data),
        FileOp::SetLen(len) => img.resize(*len as usize, 0),
    }
}

/// Applies a directory entry op to a directory's entries as the crash does: a rename or an
/// unlink acts only on the entry it named when issued.
pub(super) fn apply_dir_op(entries: &mut BTreeMap<OsString, Entry>, op: &DirOp) {
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

pub(super) fn write_into(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off as usize..end].copy_from_slice(data);
}

/// `path` as an absolute path without `.`/`..`, split into parent and name.
pub(super) fn split(path: &Path) -> IoResult<(PathBuf, OsString)> {
    let norm = normalize(path)?;
    match (norm.parent(), norm.file_name()) {
        (Some(p), Some(n)) => Ok((p.to_path_buf(), n.to_os_string())),
        _ => Err(io(std::io::ErrorKind::InvalidInput, "not a file path")),
    }
}

pub(super) fn normalize(path: &Path) -> IoResult<PathBuf> {
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
    pub(super) fn crash_image(&self, fate: FileFate, ino: u64) -> Vec<u8> {
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
                FileFate::Random(_) => splitmix64_next(&mut seed) % 3,
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
                        if splitmix64_next(&mut seed) % 2 == 1 {
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
    pub(super) fn tick(&mut self, op: SimOp, path: &Path) -> Tick {
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

    pub(super) fn alive(&self) -> IoResult<()> {
        if self.dead { Err(dead()) } else { Ok(()) }
    }

    pub(super) fn dir_mut(&mut self, dir: &Path) -> IoResult<&mut Dir> {
        self.dirs
            .get_mut(dir)
            .ok_or_else(|| io(std::io::ErrorKind::NotFound, "no such directory"))
    }

    pub(super) fn lookup(&self, path: &Path) -> IoResult<Option<Entry>> {
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
    pub(super) fn dir_op(&mut self, kind: SimOp, dir: &Path, op: DirOp) -> IoResult<()> {
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
    pub(super) fn file_op(
        &mut self,
        kind: SimOp,
        path: &Path,
        ino: u64,
        op: FileOp,
    ) -> IoResult<()> {
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
