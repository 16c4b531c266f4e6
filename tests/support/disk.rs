//! A simulated machine with several disks (one redb file each) for power-cut and
//! fsync-failure tests: every disk keeps a *live* image (what reads see: the page cache) and
//! a *durable* image (what survives a power cut), plus the operations issued since its last
//! `sync_data`.
//!
//! * One power source: operations are counted across all disks; `cut_at = k` makes the k-th
//!   operation (1-based) fail and kills the machine — that op and every later one, reads
//!   included, return an error, so no `Drop`/`close` can tidy the images. The op in flight
//!   (a `write` or `set_len`) is kept among the pending ops: a crash may have half-done it.
//! * `crash_image` builds what a disk holds after the cut: the durable image with the
//!   pending ops each dropped, applied or torn (per 512-byte sector; per byte for writes of
//!   512 bytes or less), per [`Fate`]. `set_len` is pending until a sync, like a write.
//!   Under [`Fate::Random`] every disk draws from its own RNG (seeded from the fate's seed
//!   and the disk's index), and first draws its own style (lose every pending op, keep
//!   every one, or each at random), so the three databases can meet different fates.
//! * Fault injection (fsync-failure tests): the n-th `sync_data`, `write` or `set_len`
//!   (1-based, across all disks) returns EIO once, without effect (a failed sync leaves the
//!   pending writes in the live image but not in the durable one — ext4/XFS semantics);
//!   later calls proceed, so a caller that retried would "succeed" — the test counts calls
//!   after the fault.
//! * [`Lie`]: from op N on, `sync_data` on one disk (or on all) returns `Ok` and changes
//!   nothing (the negative control).
//!
//! Invariant: a crash image is a function of the ops issued, the cut and the [`Fate`]: the
//! same seed gives the same images.
//! Invariant: an op past the cut never reaches an image (the machine is dead).

use std::sync::{Arc, Mutex};

use flushpoint::{Db, RedbDb, RedbOptions};
use redb::StorageBackend;

use super::Rng;

/// A pending (unsynced) operation.
#[derive(Debug, Clone)]
pub enum PendingOp {
    Write { off: u64, data: Vec<u8> },
    SetLen(u64),
}

/// Which kind of call a fault is injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Write,
    SetLen,
    Sync,
}

#[derive(Debug, Default, Clone)]
pub struct DiskState {
    pub live: Vec<u8>,
    pub durable: Vec<u8>,
    pub pending: Vec<PendingOp>,
    /// `sync_data` calls that reached this disk after the injected fault.
    pub syncs_after_fault: u64,
    pub writes: u64,
    pub syncs: u64,
    pub set_lens: u64,
}

#[derive(Debug, Default)]
pub struct Machine {
    pub disks: Vec<DiskState>,
    /// Operations (write, set_len, sync_data) so far, across disks.
    pub ops: u64,
    pub cut_at: Option<u64>,
    pub dead: bool,
    /// Syncs that lie (the negative control).
    pub lie: Option<Lie>,
    /// `ops` after each database `open_dbs` opened (creation finished), in open order.
    pub opened_at: Vec<u64>,
    /// Fault: the n-th call of this kind fails (1-based, across disks).
    pub fail: Option<(Kind, u64)>,
    pub kind_counts: [u64; 3],
    /// Faults injected, and on which disk.
    pub faults: Vec<usize>,
}

/// A lying `sync_data`: returns `Ok` and persists nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lie {
    /// The disk that lies (`None`: every disk).
    pub disk: Option<usize>,
    /// The first op (1-based, the machine's count) whose sync lies.
    pub from_op: u64,
}

/// A handle on a shared machine.
#[derive(Debug, Clone, Default)]
pub struct Sim(pub Arc<Mutex<Machine>>);

/// One disk of a machine: a redb `StorageBackend`.
#[derive(Debug)]
pub struct SimDisk {
    sim: Sim,
    idx: usize,
}

fn io(msg: &str) -> std::io::Error {
    std::io::Error::other(msg.to_string())
}

fn write_at(img: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if img.len() < end {
        img.resize(end, 0);
    }
    img[off as usize..end].copy_from_slice(data);
}

/// What happens to each disk's pending ops at a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Every unsynced op is lost.
    DropAll,
    /// Every unsynced op reached the disk (as a process crash).
    KeepAll,
    /// Each disk, from its own RNG (this seed and the disk's index): loses every pending op,
    /// keeps every one, or drops, applies or tears each at random.
    Random(u64),
}

pub const SECTOR: usize = 512;

/// The seed of disk `idx`'s RNG under `Fate::Random(seed)`: one RNG per disk.
pub fn disk_seed(seed: u64, idx: usize) -> u64 {
    Rng(seed ^ (idx as u64 + 1).wrapping_mul(0xd1b5_4a32_d192_ed03)).next_u64()
}

impl DiskState {
    /// The content of disk `idx` after a power cut, with the pending ops' fates from `fate`.
    pub fn crash_image(&self, idx: usize, fate: Fate) -> Vec<u8> {
        let mut img = self.durable.clone();
        let mut rng = Rng(match fate {
            Fate::Random(s) => disk_seed(s, idx),
            _ => 0,
        });
        // This disk's style: 0 loses every pending op, 1 keeps every one, 2 and 3 draw per op.
        let style = match fate {
            Fate::DropAll => 0,
            Fate::KeepAll => 1,
            Fate::Random(_) => rng.below(4),
        };
        for op in &self.pending {
            // 0: drop, 1: apply, 2: tear.
            let f = if style < 2 { style } else { rng.below(3) };
            match (op, f) {
                (_, 0) => {}
                (PendingOp::SetLen(len), _) => img.resize(*len as usize, 0),
                (PendingOp::Write { off, data }, 1) => write_at(&mut img, *off, data),
                (PendingOp::Write { off, data }, _) => {
                    // Torn: byte-atomic media with powersafe overwrite (redb's model): each
                    // sector (each byte, for a write of at most one sector) lands or not.
                    let unit = if data.len() <= SECTOR { 1 } else { SECTOR };
                    for (i, chunk) in data.chunks(unit).enumerate() {
                        if rng.below(2) == 1 {
                            write_at(&mut img, off + (i * unit) as u64, chunk);
                        }
                    }
                }
            }
        }
        img
    }
}

impl Sim {
    /// A machine with `n` empty disks.
    pub fn new(n: usize) -> Sim {
        Sim(Arc::new(Mutex::new(Machine {
            disks: vec![DiskState::default(); n],
            ..Machine::default()
        })))
    }

    /// A machine whose disks hold `images` (durable and live).
    pub fn from_images(images: &[Vec<u8>]) -> Sim {
        let sim = Sim::new(images.len());
        for (d, img) in sim.0.lock().unwrap().disks.iter_mut().zip(images) {
            d.live = img.clone();
            d.durable = img.clone();
        }
        sim
    }

    pub fn disk(&self, idx: usize) -> SimDisk {
        SimDisk {
            sim: self.clone(),
            idx,
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, Machine> {
        self.0.lock().unwrap()
    }

    /// Crash images of every disk.
    pub fn crash_images(&self, fate: Fate) -> Vec<Vec<u8>> {
        self.lock()
            .disks
            .iter()
            .enumerate()
            .map(|(i, d)| d.crash_image(i, fate))
            .collect()
    }

    /// The durable images (a power cut that lost every unsynced op).
    pub fn durable_images(&self) -> Vec<Vec<u8>> {
        self.crash_images(Fate::DropAll)
    }

    /// Opens redb over every disk (named as the node's databases).
    pub fn open_dbs(&self, options: &RedbOptions) -> flushpoint::Result<Vec<Arc<dyn Db>>> {
        let n = self.lock().disks.len();
        let names = ["block store", "state", "app"];
        (0..n)
            .map(|i| {
                let db = RedbDb::with_backend(names[i % 3], self.disk(i), options)?;
                let mut m = self.lock();
                let ops = m.ops;
                m.opened_at.push(ops);
                Ok(Arc::new(db) as Arc<dyn Db>)
            })
            .collect()
    }
}

impl Machine {
    /// Counts an op; fails it if the power is cut now or a fault is due.
    fn tick(&mut self, kind: Kind, idx: usize, op: Option<PendingOp>) -> std::io::Result<()> {
        if self.dead {
            return Err(io("power is off"));
        }
        self.ops += 1;
        if self.cut_at == Some(self.ops) {
            self.dead = true;
            if let Some(op) = op {
                self.disks[idx].pending.push(op);
            }
            return Err(io("power cut"));
        }
        let k = kind as usize;
        self.kind_counts[k] += 1;
        if let Some((fk, n)) = self.fail
            && fk == kind
            && n == self.kind_counts[k]
        {
            self.faults.push(idx);
            return Err(io("injected EIO"));
        }
        if kind == Kind::Sync && !self.faults.is_empty() {
            self.disks[idx].syncs_after_fault += 1;
        }
        Ok(())
    }
}

type IoResult<T> = std::io::Result<T>;

impl StorageBackend for SimDisk {
    fn len(&self) -> IoResult<u64> {
        let m = self.sim.lock();
        if m.dead {
            return Err(io("power is off"));
        }
        Ok(m.disks[self.idx].live.len() as u64)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> IoResult<()> {
        let m = self.sim.lock();
        if m.dead {
            return Err(io("power is off"));
        }
        let live = &m.disks[self.idx].live;
        let end = offset as usize + out.len();
        if end > live.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end",
            ));
        }
        out.copy_from_slice(&live[offset as usize..end]);
        Ok(())
    }
    fn set_len(&self, len: u64) -> IoResult<()> {
        let mut m = self.sim.lock();
        m.tick(Kind::SetLen, self.idx, Some(PendingOp::SetLen(len)))?;
        let d = &mut m.disks[self.idx];
        d.set_lens += 1;
        d.live.resize(len as usize, 0);
        d.pending.push(PendingOp::SetLen(len));
        Ok(())
    }
    fn sync_data(&self) -> IoResult<()> {
        let mut m = self.sim.lock();
        m.tick(Kind::Sync, self.idx, None)?;
        let lying = m
            .lie
            .is_some_and(|l| m.ops >= l.from_op && l.disk.is_none_or(|d| d == self.idx));
        let d = &mut m.disks[self.idx];
        d.syncs += 1;
        if !lying {
            d.durable = d.live.clone();
            d.pending.clear();
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> IoResult<()> {
        let mut m = self.sim.lock();
        let op = PendingOp::Write {
            off: offset,
            data: data.to_vec(),
        };
        m.tick(Kind::Write, self.idx, Some(op.clone()))?;
        let d = &mut m.disks[self.idx];
        d.writes += 1;
        write_at(&mut d.live, offset, data);
        d.pending.push(op);
        Ok(())
    }
    fn close(&self) -> IoResult<()> {
        Ok(())
    }
}
