//! Reads: a keyspace's snapshot — the overlay's answer, a redb read transaction and a runs
//! keyspace's runs, taken under one state lock ([`snapshot`]) — and the point reads and
//! ranges over it, the overlay winning over the index (ADR 0008, 0013, 0014).
//!
//! * A separating keyspace's snapshot pins its trim epoch ([`ReadPin`]): no segment its
//!   pointers lead to is unlinked while the pin lives; a value behind a pointer is read
//!   from its segment and checked against the pointer's crc32 ([`stored_value`]).
//! * [`get_many`] and [`range`] are `JournalDb`'s `Db` reads. In a checked index
//!   (`index.rs`) every pair they read is checked against its crc32, and a point lookup
//!   that misses checks the pairs beside where its key would sort.
//!
//! Invariant: an entry leaves the overlay only after its redb commit, and a step's runs
//! enter the read list under the same lock: a snapshot sees every write in one of the
//! overlay, the runs or the index, never in none.
//! Invariant: reads write nothing (the last reader's pin may let doomed segments go).

use std::sync::Arc;

use bytes::Bytes;
use redb::{ReadableDatabase, TableDefinition, TableError};

use super::format::{VALUE_INLINE, ValueAt, table_name};
use super::manifest::RunList;
use super::overlay::Overlay;
use super::run::{Lookup, MergedRuns, Run};
use super::segments::unlink_doomed;
use super::state::Core;
use crate::db::{DbIter, Direction, Entry, GuardedDrop, GuardedIter, KeyRange, MergeOver};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::OpenMode;

/// What a read sees ([`snapshot`]): the overlay's answer, redb's read transaction, a
/// separating keyspace's pin, and a runs keyspace's runs, newest first.
pub(super) struct Snapshot<'a, T> {
    overlay: T,
    txn: GuardedDrop<redb::ReadTransaction>,
    pin: Option<ReadPin<'a>>,
    runs: Option<RunList>,
}

/// The overlay's view of `keyspace` and a redb read transaction taken under the same
/// lock: an entry leaves the overlay only after its redb commit, so the pair is one
/// consistent snapshot. For a separating keyspace the snapshot's trim epoch is pinned
/// too: no segment its pointers lead to is unlinked while the pin lives. For a keyspace
/// indexed by runs, its runs as they stand under the same lock (a step's run enters
/// the list as its units leave the overlay).
fn snapshot<'a, T>(
    core: &'a Core,
    db: &str,
    keyspace: &str,
    from_overlay: impl FnOnce(&Overlay, &str) -> T,
) -> Result<Snapshot<'a, T>> {
    core.poison.check(db)?;
    let mut st = core.lock_state();
    let t = from_overlay(st.queue.overlay(), keyspace);
    let runs = st.manifest.list(keyspace);
    // Under the state lock: the guard catches a panic before it could unwind through
    // (and poison) the lock.
    let txn = core.index_call("begin read", || {
        core.index
            .begin_read()
            .map_err(|e| Error::storage(db, "begin read", e))
    })?;
    let txn = GuardedDrop::new(core.index_guard.clone(), "end read", txn);
    // Ordering: the epoch is pinned under the lock the snapshot was taken under. Pinned
    // after letting it go, a trim coming in between could unlink a segment the snapshot's
    // pointers lead to.
    let pin = if st.separated.contains_key(keyspace) {
        let epoch = st.segments.pin();
        Some(ReadPin { core, epoch })
    } else {
        None
    };
    drop(st);
    Ok(Snapshot {
        overlay: t,
        txn,
        pin,
        runs,
    })
}

/// A reader's hold on its snapshot's trim epoch (see [`snapshot`]).
#[derive(Debug)]
struct ReadPin<'a> {
    core: &'a Core,
    epoch: u64,
}

impl Drop for ReadPin<'_> {
    fn drop(&mut self) {
        let doomed = self.core.lock_state().segments.unpin(self.epoch);
        // The last reader of an old snapshot lets the segments doomed since go; a failure
        // poisons the engine (callers see it on their next call).
        if doomed && !self.core.poison.is_set() {
            let _ = unlink_doomed(self.core);
        }
    }
}

/// What `runs` (newest first) say of `key`: the first that holds an op on it answers.
fn get_from_runs(runs: &[Arc<Run>], key: &[u8]) -> Result<Option<Bytes>> {
    for run in runs {
        match run.get(key)? {
            Lookup::Absent => continue,
            Lookup::Put(v) => return Ok(Some(v)),
            Lookup::Deleted => return Ok(None),
        }
    }
    Ok(None)
}

/// [`stored_value`] for a run's stored value: an inline one is sliced, not copied.
fn run_value(core: &Core, db: &str, key: &[u8], stored: Bytes) -> Result<Bytes> {
    if stored.first() == Some(&VALUE_INLINE) {
        return Ok(stored.slice(1..));
    }
    stored_value(core, db, key, &stored)
}

/// The value an index entry of a separating keyspace stands for: its inline bytes, or
/// the bytes its pointer leads to, checked against the pointer's crc32.
fn stored_value(core: &Core, db: &str, key: &[u8], stored: &[u8]) -> Result<Bytes> {
    let corrupt_at = |reason| Error::Corrupt {
        db: db.to_string(),
        key: key.to_vec(),
        height: None,
        reason,
    };
    let Some(at) = ValueAt::decode(stored).map_err(corrupt_at)? else {
        return Ok(Bytes::copy_from_slice(&stored[1..]));
    };
    let path = core.segment_path(at.segment);
    core.step.point();
    let file = match core.fs.open_file(&path, OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt_at(CorruptReason::Invalid(
                "the segment holding the value is missing",
            )));
        }
        Err(e) => return Err(Error::io(db, "open segment", &path, e)),
    };
    // A pointer past the segment's end (a truncated file, or a damaged pointer) is
    // corruption, caught before a buffer of its length is made.
    let file_len = file
        .len()
        .map_err(|e| Error::io(db, "stat segment", &path, e))?;
    if at.offset.saturating_add(u64::from(at.len)) > file_len {
        return Err(corrupt_at(CorruptReason::Invalid(
            "the value's pointer passes the segment's end",
        )));
    }
    let mut value = vec![0u8; at.len as usize];
    file.read_at(at.offset, &mut value)
        .map_err(|e| Error::io(db, "read value", &path, e))?;
    let computed = crc32fast::hash(&value);
    if computed != at.crc {
        return Err(corrupt_at(CorruptReason::Checksum {
            stored: at.crc,
            computed,
        }));
    }
    core.counters.values_read_from_journal.add(1);
    Ok(Bytes::from(value))
}

type ReadTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

/// One pair from a redb range, as redb yields it.
type RedbItem = std::result::Result<
    (
        redb::AccessGuard<'static, &'static [u8]>,
        redb::AccessGuard<'static, &'static [u8]>,
    ),
    redb::StorageError,
>;

/// `keyspace`'s table in the index as `txn` sees it (`None`: not created); errors name `db`.
pub(super) fn open_read_table(
    txn: &redb::ReadTransaction,
    db: &str,
    keyspace: &str,
) -> Result<Option<ReadTable>> {
    let name = table_name(keyspace);
    let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&name);
    match txn.open_table(def) {
        Ok(t) => Ok(Some(t)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(Error::storage(db, "open table", e)),
    }
}

/// Overlay answer for one key: `Some(v)` decided by the overlay (a value or a tombstone),
/// `None` when redb must be asked.
type OverlayHit = Option<Option<Bytes>>;

/// The values of `keys` in keyspace `name`, as one snapshot sees them.
pub(super) fn get_many(core: &Core, name: &str, keys: &[&[u8]]) -> Result<Vec<Option<Bytes>>> {
    let Snapshot {
        overlay: hits,
        txn,
        pin,
        runs,
    } = snapshot(core, name, name, |ov, ks| {
        keys.iter()
            .map(|k| ov.get(ks, k))
            .collect::<Vec<OverlayHit>>()
    })?;
    if let Some(runs) = runs {
        return keys
            .iter()
            .zip(hits)
            .map(|(k, hit)| match hit {
                Some(v) => Ok(v),
                None => match (get_from_runs(&runs, k)?, &pin) {
                    (None, _) => Ok(None),
                    (Some(v), None) => Ok(Some(v)),
                    // A separating keyspace's runs hold the stored form (ADR 0016).
                    (Some(stored), Some(_)) => run_value(core, name, k, stored).map(Some),
                },
            })
            .collect();
    }
    let mut table = None;
    let mut out = Vec::with_capacity(keys.len());
    for (k, hit) in keys.iter().zip(hits) {
        match hit {
            Some(v) => out.push(v),
            None => {
                if table.is_none() {
                    let t = core.index_call("open table", || open_read_table(&txn, name, name))?;
                    table =
                        Some(t.map(|t| GuardedDrop::new(core.index_guard.clone(), "end read", t)));
                }
                let stored = match table.as_ref().expect("opened above") {
                    Some(t) => core.index_call("get", || {
                        let storage = |e| Error::storage(name, "get", e);
                        match t.get(*k).map_err(storage)? {
                            Some(g) => {
                                let stored = core.layout.value_of(name, k, g.value())?;
                                Ok(Some(Bytes::copy_from_slice(stored)))
                            }
                            // A flipped key is reported, not read as absent.
                            None => core
                                .layout
                                .check_miss(name, &**t, k, storage)
                                .map(|()| None),
                        }
                    })?,
                    None => None,
                };
                let v = match (stored, &pin) {
                    (None, _) => None,
                    (Some(v), None) => Some(v),
                    (Some(stored), Some(_)) => Some(stored_value(core, name, k, &stored)?),
                };
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// Keyspace `name`'s pairs in `range`, in `direction`, as one snapshot sees them.
pub(super) fn range<'a>(
    core: &'a Core,
    name: &str,
    range: KeyRange,
    direction: Direction,
) -> Result<DbIter<'a>> {
    core.poison.check(name)?;
    if range.is_empty() {
        return Ok(Box::new(std::iter::empty()));
    }
    let bounds = range.as_ref_bounds();
    let Snapshot {
        overlay: mut over,
        txn,
        pin,
        runs,
    } = snapshot(core, name, name, |ov, ks| ov.range(ks, &range))?;
    if direction == Direction::Reverse {
        over.reverse();
    }
    let table = core.index_call("open table", || open_read_table(&txn, name, name))?;
    let table = table.map(|t| GuardedDrop::new(core.index_guard.clone(), "end read", t));
    let disk: DbIter<'_> = match (runs, table) {
        // The runs newest first, each key's newest op; tombstones hide older runs' pairs
        // and are left out.
        (Some(runs), _) => Box::new(
            MergedRuns::over(&runs, &range, direction, false)
                .map(|op| op.map(|(k, v)| (k, v.expect("invariant: tombstones are left out")))),
        ),
        (None, None) => Box::new(std::iter::empty()),
        (None, Some(table)) => {
            let r = core.index_call("range", || {
                table
                    .range::<&[u8]>(bounds)
                    .map_err(|e| Error::storage(name, "range", e))
            })?;
            let (owned_name, layout) = (name.to_string(), core.layout);
            // The stored bytes, checked against their crc32 in the checked layout: a
            // pointer is followed only for a pair the merge returns (one the overlay
            // shadows is never read).
            let map = move |item: RedbItem| {
                let (k, v) = item.map_err(|e| Error::storage(&owned_name, "iterate", e))?;
                let stored = layout.value_of(&owned_name, k.value(), v.value())?;
                Ok((
                    Bytes::copy_from_slice(k.value()),
                    Bytes::copy_from_slice(stored),
                ))
            };
            // Each `next` reads pages in redb: under the guard, as is the range's drop.
            let guard = &*core.index_guard;
            match direction {
                Direction::Forward => Box::new(GuardedIter::new(guard, "iterate", r.map(map))),
                Direction::Reverse => {
                    Box::new(GuardedIter::new(guard, "iterate", r.rev().map(map)))
                }
            }
        }
    };
    // The pin lives as long as the iterator: its pointers stay readable.
    let resolve: Option<Resolve<'_>> = pin.map(|pin| {
        let name = name.to_string();
        Box::new(move |(k, stored): Entry| {
            let _pinned = &pin;
            let v = stored_value(core, &name, &k, &stored)?;
            Ok((k, v))
        }) as Resolve<'_>
    });
    // The overlay wins on equal keys and its tombstones hide the index's pairs.
    Ok(Box::new(MergeOver::resolving(
        over.into_iter(),
        disk,
        direction,
        move |pair| match &resolve {
            Some(resolve) => resolve(pair),
            None => Ok(pair),
        },
    )))
}

/// Turns a pair as the index stores it into the pair as written.
type Resolve<'a> = Box<dyn Fn(Entry) -> Result<Entry> + Send + 'a>;
