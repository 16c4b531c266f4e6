//! The demo app's undo log and rollback.
//!
//! Each commit of block h writes, in the same batch as its values and meta, an undo record
//! for h (the meta before h and the stored record each written key had before h), and
//! deletes the undo record of h − [`UNDO_RETENTION_BLOCKS`]. While holding, the records of
//! a window's last commits are owed ([`UndoOwed`]) and written into the window before its
//! flush point takes it. So the undo records are durable exactly when the commit is, and
//! the app can roll its durable state back to any height down to
//! `durable height − UNDO_RETENTION_BLOCKS` in one synced batch ([`rollback_batch`]).
//!
//! Invariant: the undo records form one contiguous run of heights ending at the durable
//! height (or none): every commit adds the next one and a rollback removes the top ones.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::layout::{AppMeta, AppUndo, CommitKeys, data_key, undo_key};
use crate::app::AppInfo;
use crate::codec::keys;
use crate::db::{Batch, Db, Direction, Durability, KeyRange};
use crate::error::{CorruptReason, Error, Result};
use crate::holding::HoldingDb;
use crate::types::{decode, encode};

/// How many blocks (unit: blocks, counted down from the app's durable height) the demo app
/// keeps undo records for: it can roll back to `height − UNDO_RETENTION_BLOCKS` at the
/// lowest.
///
/// Why this bound: a rollback is how an operator recovers from a bad block (an app-hash
/// mismatch or a bad upgrade) found soon after it was committed: a mismatch shows at the
/// next block, and CometBFT's own rollback goes back one height. Sixteen blocks leave a wide
/// margin for that while the undo log stays a fixed window (sixteen records, one deleted
/// per commit, each about the size of the block's writes' keys and prior values), never a
/// second copy of the history.
pub const UNDO_RETENTION_BLOCKS: u64 = 16;
const _: () = assert!(
    UNDO_RETENTION_BLOCKS >= 1,
    "a rollback of one block needs one undo record"
);

/// A commit made while holding, one of the last [`UNDO_RETENTION_BLOCKS`] since the flush
/// point: what its undo record needs, kept until the flush point writes the record.
///
/// Why the last ones only, with the window's values read as each commit begins: the undo
/// records of earlier commits of the same window are deleted by later commits in it, so
/// keeping them would only hold their keys and old values in memory (a few hundred bytes
/// a write) until the flush point. The read costs one lookup in the open window per key.
#[derive(Debug)]
pub(super) struct HeldCommit {
    height: u64,
    prev: AppInfo,
    keys: CommitKeys,
    /// Per key of `keys`: the value the open window held for it when the commit began
    /// (`Some(None)`: the window deleted it), or `None` when the window had not written it
    /// (its value is then what it was before the window, read when the record is written).
    before_in_window: Vec<Option<Option<Bytes>>>,
}

/// The undo records the commits of a held window owe: those of its last
/// [`UNDO_RETENTION_BLOCKS`] commits, written by [`UndoOwed::write`] before its flush point
/// takes the window. Empty when not holding.
#[derive(Debug, Default)]
pub(super) struct UndoOwed(VecDeque<HeldCommit>);

impl UndoOwed {
    /// Keeps held commit `height` (its meta before it `prev`, its data keys `keys`, and what
    /// the open window held for each, `before_in_window`), dropping the oldest kept one
    /// past [`UNDO_RETENTION_BLOCKS`].
    pub(super) fn push(
        &mut self,
        height: u64,
        prev: AppInfo,
        keys: CommitKeys,
        before_in_window: Vec<Option<Option<Bytes>>>,
    ) {
        debug_assert_eq!(before_in_window.len(), keys.len(), "invariant: one per key");
        // Only the last UNDO_RETENTION_BLOCKS commits owe a record at the flush point:
        // an older one's would be deleted in the same window (by a later commit).
        if self.0.len() == UNDO_RETENTION_BLOCKS as usize {
            self.0.pop_front();
        }
        self.0.push_back(HeldCommit {
            height,
            prev,
            keys,
            before_in_window,
        });
    }

    /// Held commits kept.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// No held commit is kept.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The last held commit kept.
    #[cfg(test)]
    fn back(&self) -> Option<&HeldCommit> {
        self.0.back()
    }

    /// Writes to `db`, held, the undo records owed, and forgets them. A key's record before
    /// height `h` is what the open window held for it when commit `h` began, else what it
    /// was before the window (the frozen window in flight, then the disk) — read here, once
    /// for all of them.
    ///
    /// Crash: none on its own — the records join the open window, and the flush point
    /// writes them in the same synced batch as the commits they undo.
    pub(super) fn write<D: Db>(&mut self, db: &HoldingDb<D>) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let owed = std::mem::take(&mut self.0);
        debug_assert!(
            owed.len() <= UNDO_RETENTION_BLOCKS as usize,
            "invariant: at most {UNDO_RETENTION_BLOCKS} held commits are kept"
        );
        // Keys the window had not written when their commit began: as they stood before it.
        let unread: Vec<&[u8]> = owed
            .iter()
            .flat_map(|c| c.keys.iter().zip(&c.before_in_window))
            .filter(|(_, before)| before.is_none())
            .map(|(dk, _)| dk)
            .collect();
        let mut read = db.get_many_below_open(&unread)?.into_iter();
        let mut batch = Batch::with_capacity(owed.len());
        for c in &owed {
            let entries = c
                .keys
                .ranges()
                .zip(&c.before_in_window)
                .map(|(r, before)| {
                    let old = match before {
                        Some(in_window) => in_window.clone(),
                        None => read
                            .next()
                            .expect("invariant: one value read per key the window had not"),
                    };
                    (c.keys.app_key(r), old)
                })
                .collect();
            put_undo(&mut batch, c.height, c.prev, entries);
        }
        debug_assert!(read.next().is_none(), "invariant: every value read is used");
        db.write(&batch, Durability::Synced)
    }
}

/// Puts block `height`'s undo record in `batch`: the meta before it, `prev`, and per app key
/// it wrote, its stored record before it.
pub(super) fn put_undo(
    batch: &mut Batch,
    height: u64,
    prev: AppInfo,
    entries: Vec<(Bytes, Option<Bytes>)>,
) {
    let uk = undo_key(height);
    let undo = AppUndo { prev, entries };
    batch.put(Bytes::copy_from_slice(&uk), encode(&uk, &undo));
}

/// The lowest height of the durable undo records that run contiguously down from `top`
/// (`top + 1` when there is none at `top`).
pub(super) fn durable_undo_run<D: Db>(db: &HoldingDb<D>, top: u64) -> Result<u64> {
    let mut lowest = top + 1;
    let range = KeyRange::between(
        Bytes::copy_from_slice(&undo_key(0)),
        Bytes::copy_from_slice(&undo_key(top + 1)),
    );
    for item in db.range_durable(range, Direction::Reverse)? {
        let (k, _) = item?;
        match keys::height_of(&k) {
            Some(h) if h + 1 == lowest => lowest = h,
            _ => break,
        }
    }
    Ok(lowest)
}

/// The batch that rolls the app's durable state at `durable` back to `height` (below it),
/// and the app's meta at `height`: the undo records of `durable.height` down to
/// `height + 1` applied (each key gets the record it had before the lowest of them) and
/// deleted, and the meta as it was at `height`.
pub(super) fn rollback_batch<D: Db>(
    db: &HoldingDb<D>,
    durable: AppInfo,
    height: u64,
) -> Result<(Batch, AppInfo)> {
    let lowest = durable_undo_run(db, durable.height)?.saturating_sub(1);
    if height < lowest {
        return Err(Error::AppCannotRollBack {
            to: height,
            app_height: durable.height,
            lowest: Some(lowest),
        });
    }
    // Highest first, so each key ends with the record it had before block height + 1.
    let mut restore: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
    let mut batch = Batch::new();
    let mut prev = durable;
    for h in (height + 1..=durable.height).rev() {
        let uk = undo_key(h);
        let v = db.get_durable(&uk)?.ok_or_else(|| Error::NotFound {
            db: db.name().to_string(),
            what: format!("undo record of block {h}"),
        })?;
        let undo = decode::<AppUndo>(&uk, &v).map_err(|r| corrupt(db, &uk, r))?;
        if undo.prev.height >= h {
            return Err(corrupt(
                db,
                &uk,
                CorruptReason::Invalid("undo record's previous height is not below its block"),
            ));
        }
        for (k, old) in undo.entries {
            restore.insert(data_key(&k), old);
        }
        batch.delete(Bytes::copy_from_slice(&uk));
        prev = undo.prev;
    }
    for (dk, old) in restore {
        match old {
            Some(rec) => batch.put(dk, rec),
            None => batch.delete(dk),
        };
    }
    let mk = keys::singleton(keys::APP_META);
    if prev.height == 0 {
        batch.delete(Bytes::copy_from_slice(&mk));
    } else {
        batch.put(Bytes::copy_from_slice(&mk), encode(&mk, &AppMeta(prev)));
    }
    Ok((batch, prev))
}

/// The error for a record under `key` of `db` that does not decode.
fn corrupt<D: Db>(db: &HoldingDb<D>, key: &[u8], reason: CorruptReason) -> Error {
    Error::Corrupt {
        db: db.name().to_string(),
        key: key.to_vec(),
        height: keys::height_of(key),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::App;
    use crate::db::{MemoryDb, collect_range};
    use crate::demo::Header;
    use crate::demo::kv::KvApp;
    use crate::demo::kv::layout::HALT_HEIGHT_KEY;
    use crate::demo::kv::tx::Tx;
    use crate::demo::types::Block;
    use std::sync::Arc;

    /// Blocks that set, overwrite and delete a small key space, so undo records carry prior
    /// values as well as absences.
    fn block(h: u64) -> Block {
        let key = |i: u64| Bytes::from(format!("k{}", (h * 7 + i) % 11));
        let mut txs = vec![
            Tx::Set(key(0), Bytes::from(format!("v{h}"))).encode(),
            Tx::Set(key(1), Bytes::from(format!("w{h}"))).encode(),
        ];
        if h.is_multiple_of(3) {
            txs.push(Tx::Delete(key(2)).encode());
        }
        if h == 5 {
            txs.push(Tx::HaltAt(1_000).encode());
        }
        Block {
            header: Header {
                height: h,
                ..Header::default()
            },
            txs,
            ..Block::default()
        }
    }

    type Snapshot = (AppInfo, BTreeMap<Bytes, Bytes>);

    /// The app's info and its data keys (undo records and meta excluded).
    fn snapshot(app: &KvApp<MemoryDb>) -> Snapshot {
        let data = collect_range(
            &**app.db(),
            KeyRange::prefix(&[keys::APP_DATA]),
            Direction::Forward,
        )
        .unwrap()
        .into_iter()
        .collect();
        (app.committed().unwrap(), data)
    }

    /// Commits blocks 1..=n, returning the snapshot after each height (index = height).
    /// Blocks 4..=9 are held (as in block sync) and written at flush points after 6 and 9,
    /// so undo records go through a window too.
    fn committed(n: u64) -> (KvApp<MemoryDb>, Vec<Snapshot>) {
        let mut app = KvApp::open(Arc::new(HoldingDb::new(MemoryDb::new("app")))).unwrap();
        let mut snaps = vec![snapshot(&app)];
        for h in 1..=n {
            if h == 4 {
                assert!(app.hold().unwrap());
            }
            app.execute_block(&block(h)).unwrap();
            app.commit().unwrap();
            if h == 6 || h == 9 {
                app.write_held().unwrap();
            }
            if h == 9 {
                app.stop_holding().unwrap();
            }
            snaps.push(snapshot(&app));
        }
        if (4..9).contains(&n) {
            app.write_held().unwrap();
            app.stop_holding().unwrap();
        }
        assert_eq!(app.durable().unwrap(), app.committed().unwrap());
        (app, snaps)
    }

    const N: u64 = UNDO_RETENTION_BLOCKS + 5;

    /// Commits 1..=n: 1 and 2 durable (their undo records read per commit), then held in
    /// two long windows — 3..=split frozen and left in flight while split+1..=n commits —
    /// so the undo records window 2 owes find old values among its own earlier commits
    /// (beyond the kept run), in the frozen window and on disk.
    fn committed_in_long_windows(n: u64, split: u64) -> (KvApp<MemoryDb>, Vec<Snapshot>) {
        assert!(
            n - split > UNDO_RETENTION_BLOCKS,
            "window 2 outgrows the kept run"
        );
        let mut app = KvApp::open(Arc::new(HoldingDb::new(MemoryDb::new("app")))).unwrap();
        let mut snaps = vec![snapshot(&app)];
        for h in 1..=n {
            if h == 3 {
                assert!(app.hold().unwrap());
            }
            app.execute_block(&block(h)).unwrap();
            app.commit().unwrap();
            if h == split {
                app.prepare_flush().unwrap();
                app.db.freeze().unwrap();
            }
            snaps.push(snapshot(&app));
        }
        // As the node does: the app prepares the next window while the first is in flight.
        app.prepare_flush().unwrap();
        app.db.write_frozen().unwrap();
        app.write_held().unwrap();
        app.stop_holding().unwrap();
        assert_eq!(app.durable().unwrap(), app.committed().unwrap());
        (app, snaps)
    }

    /// A long held window keeps the last [`UNDO_RETENTION_BLOCKS`] commits only, and each
    /// keeps, per key, the value the window held before it — the window's own copy (the same
    /// memory) — or nothing when the window had not written the key. The oracle is this
    /// test's own list of the keys each earlier block of the window wrote (from the blocks'
    /// transactions), and the values read through the app before each commit.
    #[test]
    fn a_held_window_keeps_its_last_commits_with_the_windows_values_before_them() {
        let mut app = KvApp::open(Arc::new(HoldingDb::new(MemoryDb::new("app")))).unwrap();
        let blocks = 3 * UNDO_RETENTION_BLOCKS;
        // Outside the window: written and made durable before holding.
        app.execute_block(&block(1)).unwrap();
        app.commit().unwrap();
        assert!(app.hold().unwrap());
        let mut written_in_window: std::collections::HashSet<Bytes> = Default::default();
        let (mut in_window, mut not_in_window) = (0, 0);
        for h in 2..=blocks {
            let b = block(h);
            let keys: Vec<Bytes> = b
                .txs
                .iter()
                .filter_map(|tx| match Tx::decode(tx) {
                    Some(Tx::Set(k, _) | Tx::Delete(k)) => Some(k),
                    Some(Tx::HaltAt(_)) => Some(Bytes::from_static(HALT_HEIGHT_KEY)),
                    _ => None,
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let read_before: Vec<Option<Bytes>> = keys
                .iter()
                .map(|k| app.db.get(&data_key(k)).unwrap())
                .collect();
            app.execute_block(&b).unwrap();
            app.commit().unwrap();
            let kept = (h - 1).min(UNDO_RETENTION_BLOCKS) as usize;
            assert_eq!(app.undo_owed.len(), kept, "height {h}: commits kept");
            let owed = app.undo_owed.back().expect("a held commit owes its undo");
            assert_eq!(owed.height, h);
            let owed_keys: Vec<&[u8]> = owed.keys.iter().collect();
            let want_keys: Vec<Bytes> = keys.iter().map(|k| data_key(k)).collect();
            assert_eq!(owed_keys, want_keys, "height {h}: the data keys");
            for ((k, read), before) in keys.iter().zip(read_before).zip(&owed.before_in_window) {
                if written_in_window.contains(k) {
                    in_window += 1;
                    let before = before.as_ref().unwrap_or_else(|| {
                        panic!("height {h}: {k:?} was written in the window, nothing kept")
                    });
                    assert_eq!(before, &read, "height {h}: {k:?}");
                    if let (Some(before), Some(read)) = (before, &read) {
                        assert_eq!(before.as_ptr(), read.as_ptr(), "height {h}: a copy kept");
                    }
                } else {
                    not_in_window += 1;
                    assert_eq!(before, &None, "height {h}: {k:?} is not in the window");
                }
            }
            written_in_window.extend(keys);
        }
        assert!(
            in_window > 0 && not_in_window > 0,
            "the blocks exercise both cases: {in_window} in the window, {not_in_window} not"
        );
    }

    #[test]
    fn undo_owed_by_long_held_windows_rolls_back_to_every_height_in_the_window_exactly() {
        let (n, split) = (2 * UNDO_RETENTION_BLOCKS + 10, 20);
        for to in n - UNDO_RETENTION_BLOCKS..=n {
            let (mut app, snaps) = committed_in_long_windows(n, split);
            assert_eq!(
                app.rollback_floor().unwrap(),
                Some(n - UNDO_RETENTION_BLOCKS)
            );
            let info = app.rollback_to(to).unwrap();
            assert_eq!(info, snaps[to as usize].0, "rollback to {to}: info");
            assert_eq!(snapshot(&app), snaps[to as usize], "rollback to {to}");
        }
    }

    #[test]
    fn a_long_held_window_writes_exactly_the_kept_undo_records() {
        let n = 2 * UNDO_RETENTION_BLOCKS + 10;
        let (app, _) = committed_in_long_windows(n, 20);
        let heights: Vec<u64> = collect_range(
            &**app.db(),
            KeyRange::prefix(&[keys::APP_UNDO]),
            Direction::Forward,
        )
        .unwrap()
        .iter()
        .map(|(k, _)| u64::from_be_bytes(k[1..9].try_into().unwrap()))
        .collect();
        let want: Vec<u64> = (n - UNDO_RETENTION_BLOCKS + 1..=n).collect();
        assert_eq!(heights, want);
    }

    #[test]
    fn undo_log_rolls_back_to_every_height_in_the_window_exactly() {
        for to in N - UNDO_RETENTION_BLOCKS..=N {
            let (mut app, snaps) = committed(N);
            assert_eq!(
                app.rollback_floor().unwrap(),
                Some(N - UNDO_RETENTION_BLOCKS)
            );
            let info = app.rollback_to(to).unwrap();
            assert_eq!(info, snaps[to as usize].0, "rollback to {to}: info");
            assert_eq!(snapshot(&app), snaps[to as usize], "rollback to {to}");
            assert_eq!(app.committed().unwrap(), info);
            assert_eq!(app.halt_height(), (to >= 5).then_some(1_000));
            // A rerun is a no-op, and re-executing the blocks reaches the same hashes.
            assert_eq!(app.rollback_to(to).unwrap(), info);
            for h in to + 1..=N {
                app.execute_block(&block(h)).unwrap();
                app.commit().unwrap();
                assert_eq!(snapshot(&app), snaps[h as usize], "replay of {h}");
            }
        }
    }

    #[test]
    fn undo_log_keeps_exactly_the_window_and_refuses_below_it_naming_the_heights() {
        let (mut app, snaps) = committed(N);
        let undo = collect_range(
            &**app.db(),
            KeyRange::prefix(&[keys::APP_UNDO]),
            Direction::Forward,
        )
        .unwrap();
        assert_eq!(undo.len() as u64, UNDO_RETENTION_BLOCKS);
        let to = N - UNDO_RETENTION_BLOCKS - 1;
        match app.rollback_to(to) {
            Err(Error::AppCannotRollBack {
                to: t,
                app_height,
                lowest,
            }) => {
                assert_eq!(
                    (t, app_height, lowest),
                    (to, N, Some(N - UNDO_RETENTION_BLOCKS))
                );
            }
            other => panic!("expected AppCannotRollBack, got {other:?}"),
        }
        assert_eq!(snapshot(&app), snaps[N as usize], "a refusal wrote nothing");
        // Not while holding: held commits have no durable undo records yet.
        app.hold().unwrap();
        assert!(matches!(
            app.rollback_to(N - 1),
            Err(Error::InvalidInput(_))
        ));
        app.stop_holding().unwrap();
        // A young app rolls back to 0, the empty app.
        let (mut young, snaps) = committed(3);
        assert_eq!(young.rollback_floor().unwrap(), Some(0));
        young.rollback_to(0).unwrap();
        assert_eq!(snapshot(&young), snaps[0]);
    }

    #[test]
    fn a_corrupt_undo_record_is_reported_not_applied() {
        let (mut app, snaps) = committed(4);
        let k = undo_key(4);
        let mut b = Batch::new();
        b.put(Bytes::copy_from_slice(&k), Bytes::from_static(b"garbage!"));
        app.db().write(&b, Durability::Synced).unwrap();
        assert!(matches!(
            app.rollback_to(2),
            Err(Error::Corrupt {
                height: Some(4),
                ..
            })
        ));
        assert_eq!(snapshot(&app).1, snaps[4].1, "nothing was applied");
    }
}
