//! Test doubles embedders can reuse in their own CI (feature `testkit`): a database that
//! records every batch (across several databases, in one global order), one that fails on
//! command, a snapshot of a directory's files, and the simulated file system ([`SimFs`])
//! that cuts the power at any file operation; and the seeded generator they use
//! ([`splitmix64`], [`splitmix64_next`]).
//!
//! Invariant: these wrappers change nothing about the wrapped database's semantics except
//! what their names say (recording; failing from a chosen write on).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::db::{Batch, Db, DbWrapper, Durability};
use crate::error::{Error, Result};

pub use crate::fs::sim::{DirFate, FileFate, SimFault, SimFile, SimFs, SimOp, SimStats};
/// splitmix64, the crate's one seeded generator (the simulated file system's fates and the
/// demo chain use it): [`splitmix64`] hashes one value, [`splitmix64_next`] steps a stream.
pub use crate::rng::{splitmix64, splitmix64_next};

/// One recorded write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    /// Position in the global order of all recorded databases.
    pub seq: u64,
    /// The database's name.
    pub db: String,
    /// The durability asked for.
    pub durability: Durability,
    /// The batch.
    pub batch: Batch,
}

/// A log shared by several [`RecordingDb`]s.
#[derive(Debug, Default, Clone)]
pub struct WriteLog(Arc<Mutex<Vec<WriteRecord>>>);

impl WriteLog {
    /// A new, empty log.
    pub fn new() -> Self {
        Self::default()
    }
    /// Every write so far, in order.
    pub fn records(&self) -> Vec<WriteRecord> {
        self.0.lock().expect("log lock").clone()
    }
    /// Number of writes so far.
    pub fn len(&self) -> usize {
        self.0.lock().expect("log lock").len()
    }
    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The database names, in order of writes (e.g. to check flush order).
    pub fn order(&self) -> Vec<(String, Durability)> {
        self.records()
            .into_iter()
            .map(|r| (r.db, r.durability))
            .collect()
    }
}

/// Records every successful write into a shared [`WriteLog`].
#[derive(Debug)]
pub struct RecordingDb<D> {
    inner: D,
    log: WriteLog,
}

impl<D: Db> RecordingDb<D> {
    /// Records `inner`'s writes into `log`.
    pub fn new(inner: D, log: WriteLog) -> Self {
        RecordingDb { inner, log }
    }
    /// The wrapped database.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

/// Writes are recorded (`write_entries` goes through `write`); reads forward.
impl<D: Db> DbWrapper for RecordingDb<D> {
    type Inner = D;
    fn inner(this: &Self) -> &D {
        &this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        // Hold the log lock across the write so the recorded order is the real order.
        let mut log = this.log.0.lock().expect("log lock");
        this.inner.write(batch, durability)?;
        let seq = log.len() as u64;
        log.push(WriteRecord {
            seq,
            db: this.inner.name().to_string(),
            durability,
            batch: batch.clone(),
        });
        Ok(())
    }
}

/// A countdown shared by several [`FailingDb`]s: the write that brings it to zero fails,
/// and so does every later one (a dead disk).
#[derive(Debug, Clone)]
pub struct FailAfter(Arc<AtomicU64>);

impl FailAfter {
    /// Lets `n` writes succeed, then fails every write.
    pub fn new(n: u64) -> Self {
        FailAfter(Arc::new(AtomicU64::new(n)))
    }
    /// Never fails.
    pub fn never() -> Self {
        Self::new(u64::MAX)
    }
    /// Writes still allowed.
    pub fn remaining(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn take(&self) -> bool {
        self.0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                if n == 0 || n == u64::MAX {
                    if n == 0 { None } else { Some(n) }
                } else {
                    Some(n - 1)
                }
            })
            .is_ok()
    }
}

/// Fails writes once its [`FailAfter`] runs out. Made with [`FailingDb::new`], the failed
/// batch is not applied (the write never reached the file); with [`FailingDb::landing`], it
/// is applied and then reported failed (a failed fsync after the data reached the file):
/// after an `Err` the caller may find either, and must handle both.
#[derive(Debug)]
pub struct FailingDb<D> {
    inner: D,
    budget: FailAfter,
    /// Whether a failed write applies its batch before the error.
    lands: bool,
    failures: AtomicU64,
    write_calls: AtomicU64,
}

impl<D: Db> FailingDb<D> {
    /// Wraps `inner` with `budget`; a failed write applies nothing.
    pub fn new(inner: D, budget: FailAfter) -> Self {
        FailingDb {
            inner,
            budget,
            lands: false,
            failures: AtomicU64::new(0),
            write_calls: AtomicU64::new(0),
        }
    }
    /// Wraps `inner` with `budget`; a failed write applies its batch, then fails.
    pub fn landing(inner: D, budget: FailAfter) -> Self {
        FailingDb {
            lands: true,
            ..Self::new(inner, budget)
        }
    }
    /// How many writes were failed (a fault test first proves its fault fired).
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::SeqCst)
    }
    /// How many writes were asked for, failed or not (a test of poisoning proves that
    /// nothing reached the write path after the failure).
    pub fn write_calls(&self) -> u64 {
        self.write_calls.load(Ordering::SeqCst)
    }
    /// The wrapped database.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

/// Writes fail on command (`write_entries` goes through `write`); reads forward.
impl<D: Db> DbWrapper for FailingDb<D> {
    type Inner = D;
    fn inner(this: &Self) -> &D {
        &this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> Result<()> {
        this.write_calls.fetch_add(1, Ordering::SeqCst);
        if !this.budget.take() {
            if this.lands {
                this.inner.write(batch, durability)?;
            }
            this.failures.fetch_add(1, Ordering::SeqCst);
            return Err(Error::storage(
                this.inner.name(),
                "write",
                "injected failure (fsync: EIO)",
            ));
        }
        this.inner.write(batch, durability)
    }
}

/// Every file under a directory with its bytes, and every directory: for asserting that a
/// command wrote nothing (take one before and one after, then
/// [`DirSnapshot::first_difference`]). Holds the bytes in memory: for test-sized homes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirSnapshot(std::collections::BTreeMap<std::path::PathBuf, Option<Vec<u8>>>);

impl DirSnapshot {
    /// Reads everything under `dir` (paths relative to it; directories as `None`).
    pub fn take(dir: &std::path::Path) -> std::io::Result<DirSnapshot> {
        let mut out = std::collections::BTreeMap::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for e in std::fs::read_dir(&d)? {
                let p = e?.path();
                let rel = p.strip_prefix(dir).unwrap_or(&p).to_path_buf();
                if p.is_dir() {
                    out.insert(rel, None);
                    todo.push(p);
                } else {
                    out.insert(rel, Some(std::fs::read(&p)?));
                }
            }
        }
        Ok(DirSnapshot(out))
    }

    /// The first difference from `self` to `after`, described: the file and the first
    /// differing byte offset or the lengths, an entry removed, created or changed in kind;
    /// `None` when they are the same.
    pub fn first_difference(&self, after: &DirSnapshot) -> Option<String> {
        for (path, old) in &self.0 {
            let path_shown = path.display();
            match (old, after.0.get(path)) {
                (_, None) => return Some(format!("{path_shown} was removed")),
                (None, Some(Some(_))) => return Some(format!("{path_shown} became a file")),
                (Some(_), Some(None)) => {
                    return Some(format!("{path_shown} became a directory"));
                }
                (Some(a), Some(Some(b))) if a != b => {
                    let (la, lb) = (a.len(), b.len());
                    return Some(match a.iter().zip(b).position(|(x, y)| x != y) {
                        Some(at) => {
                            format!("{path_shown} differs at byte {at} (length {la} then {lb})")
                        }
                        None => format!("{path_shown} changed length from {la} to {lb}"),
                    });
                }
                _ => {}
            }
        }
        after
            .0
            .keys()
            .find(|p| !self.0.contains_key(*p))
            .map(|p| format!("{} was created", p.display()))
    }
}

#[cfg(test)]
mod snapshot_tests {
    use super::DirSnapshot;

    /// The comparison sees each kind of change (a checker fed wrong answers).
    #[test]
    fn every_kind_of_change_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir(p.join("d")).unwrap();
        std::fs::write(p.join("d/f"), b"abc").unwrap();
        let before = DirSnapshot::take(p).unwrap();
        assert_eq!(
            before.first_difference(&DirSnapshot::take(p).unwrap()),
            None
        );
        let seen = |change: &dyn Fn(), undo: &dyn Fn(), says: &str| {
            change();
            let d = before.first_difference(&DirSnapshot::take(p).unwrap());
            assert!(
                d.as_deref().is_some_and(|d| d.contains(says)),
                "{says}: {d:?}"
            );
            undo();
        };
        let f = p.join("d/f");
        seen(
            &|| std::fs::write(&f, b"abd").unwrap(),
            &|| std::fs::write(&f, b"abc").unwrap(),
            "differs at byte 2",
        );
        seen(
            &|| std::fs::write(&f, b"abcd").unwrap(),
            &|| std::fs::write(&f, b"abc").unwrap(),
            "changed length from 3 to 4",
        );
        seen(
            &|| std::fs::write(p.join("new"), b"").unwrap(),
            &|| std::fs::remove_file(p.join("new")).unwrap(),
            "new was created",
        );
        seen(
            &|| std::fs::remove_file(&f).unwrap(),
            &|| std::fs::write(&f, b"abc").unwrap(),
            "d/f was removed",
        );
    }
}
