//! Rollback: lowers a home's app, block store and state to a height `to`, consistently, with
//! an intent file that makes every crash point either finishable or refused.
//!
//! Steps (each line below is a crash point; `adr/0006-rollback-in-the-library.md` has the
//! crash table):
//! 1. Check and plan, writing nothing: the home's shape must be one the handshake accepts
//!    (a flush point's roll-forward is refused until repaired), the block store must still
//!    hold block `to + 1`, the app must be able to roll back to `to`
//!    ([`App::rollback_floor`]), and the state at `to` is rebuilt from the stored history and
//!    blocks `to` and `to + 1`, checked against block `to + 1`'s header.
//! 2. The intent file [`ROLLBACK_INTENT_FILE`] — `{to, step, rebuilt state}`, a framed record
//!    with a crc32 — is written to a temporary name, fsynced, renamed into place and the
//!    home directory fsynced: durable before any database changes.
//! 3. Step `app`: the app rolls back to `to` ([`App::rollback_to`], one synced write), and its
//!    app hash is checked against the rebuilt state's. The intent is rewritten (same four
//!    operations) with step `stores`: from here on no app is needed to finish.
//! 4. Step `stores`: the block store is rolled back to `to` (top down, synced batches), then
//!    the state is written from the intent (one synced batch: the state at `to`, results and
//!    history above it removed).
//! 5. The intent file is removed and the directory fsynced.
//!
//! Why this order: the block store goes before the state so that no crash leaves a block
//! store one block above a rolled-back state, the shape the handshake takes for a per-block
//! crash and repairs by applying that block again (undoing the rollback); with the state
//! still above the block store, the handshake refuses instead. The state's rebuild needs
//! block `to + 1`, which step 4 removes: it is done in step 1 and kept in the intent. The app
//! goes first because only a caller that has the app can roll it back: once it is done,
//! [`Home::open`] finishes any interrupted rollback by itself (steps 4–5, all idempotent),
//! and before it is done `Home::open` refuses the home with [`Error::RollbackInterrupted`]
//! (rerunning [`rollback`] with the same target finishes it).
//!
//! Invariant: every file operation (intent create, write, sync, rename, remove, directory
//! fsync) goes through the home's [`FileSystem`], so a simulated one can cut the power at
//! each. Invariant: the intent file is durable before the first database write and removed
//! only after the last; while it exists no node starts on the home.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::app::App;
use crate::chain::{
    Chain, ChainBlock, ChainCommit, ChainResults, ChainState, HistorySlot, StoredHistory,
};
use crate::codec::{Reader, RecordKind, Writer};
use crate::db::Db;
use crate::error::{CorruptReason, Error, Heights, Result, RollbackRefusal, hex};
use crate::fs::{FileSystem, OpenMode, StdFs};
use crate::home::Home;
use crate::node::{HandshakeCase, classify, observe};
use crate::store::{BlockStore, StateStore};
use crate::types::{Hash, Record, decode, encode};

/// Name of the intent file a rollback keeps in the home directory while it runs.
pub const ROLLBACK_INTENT_FILE: &str = "ROLLBACK-IN-PROGRESS";
/// The temporary name the intent is written under before its rename.
const INTENT_TMP_FILE: &str = "ROLLBACK-IN-PROGRESS.tmp";
/// The longest rollback intent read, in bytes. Why: an intent holds one state (its
/// validator sets and params), far below this; a longer file is damaged, and reading it
/// whole would allocate by its length.
const INTENT_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// The step an interrupted rollback was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The app may still be above the target: only a caller with the app can finish.
    App = 1,
    /// The app is at the target: the block store and the state remain.
    Stores = 2,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::App => "app",
            Step::Stores => "stores",
        }
    }
}

/// The state a rollback lowers the state store to, as the chain encoded it: finishing the
/// rollback needs no chain types, so [`Home::open`] can do it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RebuiltState {
    /// Its height (= the rollback's target).
    height: u64,
    /// Its app hash (checked against the app's after the app step).
    app_hash: Hash,
    /// Its initial height.
    initial_height: u64,
    /// [`ChainState::encode`]'s bytes.
    bytes: Bytes,
}

/// Intent payload flag: no state to lower. (1 was an older build's typed state, refused.)
const INTENT_NO_STATE: u8 = 0;
/// Intent payload flag: a [`RebuiltState`] follows.
const INTENT_STATE: u8 = 2;

/// The intent file's record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Intent {
    to: u64,
    step: Step,
    /// The state's height when the rollback started (reported when a home is refused).
    state_height_before: u64,
    /// The state at `to`, when the state must be lowered to it.
    state: Option<RebuiltState>,
    /// Written by the tool before the rollback moved into the library: the text `to\n`.
    /// That tool lowered the state, then the block store, and never the app.
    legacy: bool,
}

impl Record for Intent {
    const KIND: RecordKind = RecordKind::ROLLBACK_INTENT;
    fn encode_payload(&self, w: &mut Writer) {
        w.u64(self.to).u8(self.step as u8);
        match &self.state {
            Some(s) => {
                w.u8(INTENT_STATE)
                    .u64(self.state_height_before)
                    .u64(s.height)
                    .hash(&s.app_hash)
                    .u64(s.initial_height)
                    .raw(&s.bytes);
            }
            None => {
                w.u8(INTENT_NO_STATE).u64(self.state_height_before);
            }
        }
    }
    fn decode_payload(r: &mut Reader<'_>) -> std::result::Result<Self, CorruptReason> {
        let to = r.u64()?;
        let step = match r.u8()? {
            1 => Step::App,
            2 => Step::Stores,
            _ => return Err(CorruptReason::Invalid("rollback step is not 1 or 2")),
        };
        let flag = r.u8()?;
        let state_height_before = match flag {
            INTENT_NO_STATE | INTENT_STATE => r.u64()?,
            _ => {
                return Err(CorruptReason::Invalid(
                    "rollback state flag is not 0 or 2 (1: an older build's intent; finish it with that build)",
                ));
            }
        };
        let state = if flag == INTENT_STATE {
            Some(RebuiltState {
                height: r.u64()?,
                app_hash: r.hash()?,
                initial_height: r.u64()?,
                bytes: Bytes::copy_from_slice(r.rest()),
            })
        } else {
            None
        };
        Ok(Intent {
            to,
            step,
            state_height_before,
            state,
            legacy: false,
        })
    }
}

/// What [`rollback`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RollbackReport {
    /// The target height.
    pub to: u64,
    /// The heights found on disk when this call started (normalized as the handshake does).
    pub before: Heights,
    /// True when this call finished a rollback a crash had interrupted.
    pub finished_interrupted: bool,
    /// True when everything was already at or below `to`: nothing was written.
    pub nothing_to_do: bool,
    /// True when this call rolled the app back.
    pub app_rolled_back: bool,
    /// True when this call lowered the state.
    pub state_rolled_back: bool,
    /// Blocks this call removed from the block store.
    pub blocks_removed: u64,
}

fn home_io(dir: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    let path = dir.to_path_buf();
    move |source| Error::Home { path, op, source }
}

/// Reads the intent file, if there is one. A torn or foreign one is `Error::Corrupt`.
fn read_intent(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Intent>> {
    let f = match fs.open_file(&dir.join(ROLLBACK_INTENT_FILE), OpenMode::Existing) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(home_io(dir, "open the rollback intent")(e)),
    };
    let len = f.len().map_err(home_io(dir, "read the rollback intent"))?;
    if len > INTENT_BYTES_MAX {
        return Err(Error::Corrupt {
            db: format!("home {}, {ROLLBACK_INTENT_FILE}", dir.display()),
            key: ROLLBACK_INTENT_FILE.as_bytes().to_vec(),
            height: None,
            reason: CorruptReason::Invalid("the rollback intent is longer than any intent"),
        });
    }
    let mut bytes = vec![0; len as usize];
    f.read_at(0, &mut bytes)
        .map_err(home_io(dir, "read the rollback intent"))?;
    if let Some(to) = legacy_target(&bytes) {
        // Refused on open like an app step (its state step may not be done); `rollback`
        // finishes it or starts over.
        return Ok(Some(Intent {
            to,
            step: Step::App,
            state_height_before: 0,
            state: None,
            legacy: true,
        }));
    }
    decode::<Intent>(ROLLBACK_INTENT_FILE.as_bytes(), &bytes)
        .map(Some)
        .map_err(|reason| Error::Corrupt {
            db: format!("home {}, {ROLLBACK_INTENT_FILE}", dir.display()),
            key: ROLLBACK_INTENT_FILE.as_bytes().to_vec(),
            height: None,
            reason,
        })
}

/// The target of an intent written by the tool before this module (decimal text and a
/// newline), which a framed record never is (its first byte is the format version, 1).
fn legacy_target(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes.strip_suffix(b"\n")?).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Writes the intent durably: temporary file, fsync, rename, directory fsync.
fn write_intent(fs: &dyn FileSystem, dir: &Path, intent: &Intent) -> Result<()> {
    let tmp = dir.join(INTENT_TMP_FILE);
    let bytes = encode(ROLLBACK_INTENT_FILE.as_bytes(), intent);
    let f = fs
        .open_file(&tmp, OpenMode::CreateTruncate)
        .map_err(home_io(dir, "create the rollback intent"))?;
    f.write_at(0, &bytes)
        .map_err(home_io(dir, "write the rollback intent"))?;
    // Without this sync the rename can survive a crash with the bytes lost: an empty intent
    // that no open can read.
    f.sync_all()
        .map_err(home_io(dir, "fsync the rollback intent"))?;
    fs.rename(&tmp, &dir.join(ROLLBACK_INTENT_FILE))
        .map_err(home_io(dir, "rename the rollback intent"))?;
    // The name must be durable before the first database write it announces.
    fs.sync_dir(dir)
        .map_err(home_io(dir, "fsync the home directory"))
}

/// Removes the intent durably.
fn remove_intent(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    fs.remove_file(&dir.join(ROLLBACK_INTENT_FILE))
        .map_err(home_io(dir, "remove the rollback intent"))?;
    fs.sync_dir(dir)
        .map_err(home_io(dir, "fsync the home directory"))
}

fn stores<C: Chain>(home: &Home) -> Result<(BlockStore<C::Block>, StateStore<C>)> {
    Ok((
        BlockStore::open(home.block_store_db.clone() as Arc<dyn Db>)?,
        StateStore::open(home.state_db.clone() as Arc<dyn Db>),
    ))
}

/// The chain of a rollback's store steps, which decode no block, commit, state or results
/// (they read the block store's range and metas and write the intent's state bytes):
/// finishing a rollback needs no chain types, so [`Home::open`] can do it. Every decode of
/// it fails, so a read it was not meant to make is reported, never misread. It has no
/// values (an enum without variants): since no decode makes one and no step is given one,
/// each method below is unreachable, which the compiler checks (`match *self {}`).
#[derive(Debug, Clone)]
enum Opaque {}

const OPAQUE: &str = "a rollback's store step decodes no chain value";

impl ChainCommit for Opaque {
    fn height(&self) -> u64 {
        match *self {}
    }
    fn block_hash(&self) -> Hash {
        match *self {}
    }
    fn encode(&self) -> Bytes {
        match *self {}
    }
    fn decode(_: &[u8]) -> std::result::Result<Self, CorruptReason> {
        Err(CorruptReason::Invalid(OPAQUE))
    }
}

impl ChainBlock for Opaque {
    type Commit = Opaque;
    fn height(&self) -> u64 {
        match *self {}
    }
    fn hash(&self) -> Hash {
        match *self {}
    }
    fn encode(&self) -> Bytes {
        match *self {}
    }
    fn decode(_: &[u8]) -> std::result::Result<Self, CorruptReason> {
        Err(CorruptReason::Invalid(OPAQUE))
    }
    fn last_commit(&self) -> &Opaque {
        match *self {}
    }
    fn parent_app_hash(&self) -> Hash {
        match *self {}
    }
    fn header_bytes(&self) -> Bytes {
        match *self {}
    }
    fn tx_count(&self) -> u32 {
        match *self {}
    }
}

impl ChainState for Opaque {
    fn height(&self) -> u64 {
        match *self {}
    }
    fn initial_height(&self) -> u64 {
        match *self {}
    }
    fn app_hash(&self) -> Hash {
        match *self {}
    }
    fn encode(&self) -> Bytes {
        match *self {}
    }
    fn decode(_: &[u8]) -> std::result::Result<Self, CorruptReason> {
        Err(CorruptReason::Invalid(OPAQUE))
    }
}

impl ChainResults for Opaque {
    fn encode(&self) -> Bytes {
        match *self {}
    }
    fn decode(_: &[u8]) -> std::result::Result<Self, CorruptReason> {
        Err(CorruptReason::Invalid(OPAQUE))
    }
}

impl Chain for Opaque {
    type Block = Opaque;
    type Commit = Opaque;
    type State = Opaque;
    type Results = Opaque;
    fn genesis_id(&self) -> Hash {
        match *self {}
    }
    fn genesis_state(&self, _: Hash) -> Opaque {
        match *self {}
    }
    fn validate(&self, _: &Opaque, _: &Opaque) -> std::result::Result<(), String> {
        match *self {}
    }
    fn next_state(&self, _: &Opaque, _: &Opaque, _: &Opaque, _: Hash) -> Opaque {
        match *self {}
    }
}

/// The stores' loads a chain reads to rebuild a past state.
struct Stored<'a, C: Chain> {
    bs: &'a BlockStore<C::Block>,
    st: &'a StateStore<C>,
}

impl<C: Chain> StoredHistory<C> for Stored<'_, C> {
    fn block(&self, height: u64) -> Result<Option<C::Block>> {
        self.bs.load_block(height)
    }
    fn results(&self, height: u64) -> Result<Option<C::Results>> {
        self.st.load_results(height)
    }
    fn history(&self, slot: HistorySlot, height: u64) -> Result<Option<(u64, Bytes)>> {
        self.st.load_history(slot, height)
    }
}

/// The target of the rollback a crash interrupted in `home`, if any.
pub fn pending_rollback(home: &Home) -> Result<Option<u64>> {
    Ok(read_intent(home.fs(), home.path())?.map(|i| i.to))
}

impl Home {
    /// Opens an existing home for [`rollback`] on the real file system: as
    /// [`Home::open_existing`], but an interrupted rollback is left for the caller to finish.
    pub fn open_for_rollback(path: &Path) -> Result<Home> {
        Self::open_for_rollback_on(Arc::new(StdFs), path, crate::home::HomeOptions::default())
    }

    /// As [`Home::open_for_rollback`], on the file system `fs`, with options (as
    /// [`Home::open_with`]). A directory without a flushpoint home is an error; nothing is
    /// created.
    pub fn open_for_rollback_on(
        fs: Arc<dyn FileSystem>,
        path: &Path,
        options: impl Into<crate::home::HomeOptions>,
    ) -> Result<Home> {
        crate::home::require_home(&*fs, path)?;
        Home::open_unchecked(fs, path, &options.into())
    }
}

/// Called by [`Home::open`]: finishes an interrupted rollback whose app step is done, and
/// refuses one whose app step may not be with [`Error::RollbackInterrupted`], writing
/// nothing.
pub(crate) fn finish_or_refuse(home: &Home) -> Result<()> {
    let Some(intent) = read_intent(home.fs(), home.path())? else {
        return Ok(());
    };
    let bs = BlockStore::<Opaque>::open(home.block_store_db.clone() as Arc<dyn Db>)?;
    if intent.step == Step::App {
        tracing::warn!(
            target: "flushpoint::rollback",
            to = intent.to,
            block_store_height = bs.height(),
            "an interrupted rollback needs its app step: the home is refused"
        );
        return Err(Error::RollbackInterrupted {
            path: home.path().to_path_buf(),
            to: intent.to,
            block_store_height: bs.height(),
            state_height: intent.state_height_before,
            step: if intent.legacy {
                "state (an older build's rollback)"
            } else {
                intent.step.name()
            },
        });
    }
    tracing::info!(
        target: "flushpoint::rollback",
        to = intent.to,
        block_store_height = bs.height(),
        "finishing an interrupted rollback on open"
    );
    finish_stores(home, &bs, &intent).map(|_| ())
}

/// Steps 4 and 5: idempotent, so a rerun after any crash inside them finishes them.
/// Returns (blocks removed, whether the state was lowered).
fn finish_stores(home: &Home, bs: &BlockStore<Opaque>, intent: &Intent) -> Result<(u64, bool)> {
    debug_assert_eq!(intent.step, Step::Stores, "invariant: the app step is done");
    // The block store first: with the blocks above the target gone and the state still
    // above it, the handshake refuses the home. The other order could leave the block store
    // one block above a lowered state, which the handshake repairs by applying that block.
    let removed = bs.rollback_to(intent.to)?;
    let mut lowered = false;
    if let Some(state) = &intent.state {
        // Rebuilt in step 1, before block `to + 1` (which it needed) was removed. Written
        // unless the state store already holds exactly it (a rerun after this step).
        let st = StateStore::<Opaque>::open(home.state_db.clone() as Arc<dyn Db>);
        if st.load_state_bytes()?.as_ref() != Some(&state.bytes) {
            st.rollback_to_bytes(
                state.height,
                &state.bytes,
                intent.state_height_before.max(state.height),
            )?;
            lowered = true;
        }
    }
    // Only now is the home consistent again.
    remove_intent(home.fs(), home.path())?;
    tracing::info!(
        target: "flushpoint::rollback",
        to = intent.to,
        blocks_removed = removed,
        "rollback finished"
    );
    Ok((removed, lowered))
}

/// Rolls `home` (opened with [`Home::open_for_rollback`]) and `app` (over the home's app
/// database) back to height `to`, or finishes a rollback to `to` that a crash interrupted.
///
/// `Ok`: the block store, the state and the app are durable at `to` or below (an app that
/// was behind stays behind: the handshake replays it), and the intent file is gone. `Err`
/// before the intent is written ([`Error::RollbackRefused`], [`Error::AppCannotRollBack`],
/// a read error): nothing was written. `Err` after: the intent stays; rerunning with the
/// same `to` finishes the rollback, and [`Home::open`] finishes or refuses it.
pub fn rollback<C: Chain>(
    home: &Home,
    app: &mut dyn App<C>,
    chain: &C,
    to: u64,
) -> Result<RollbackReport> {
    let (fs, dir) = (home.fs(), home.path());
    let (bs, st) = stores::<C>(home)?;
    let (state, observed) = observe(&bs, &st, app)?;
    let before = Heights {
        block_store_height: observed.block_store_height,
        state_height: observed.state_height,
        app_height: observed.app_height,
    };
    let refuse = |reason| Error::RollbackRefused {
        to,
        heights: before,
        reason,
    };
    let mut report = RollbackReport {
        to,
        before,
        finished_interrupted: false,
        nothing_to_do: false,
        app_rolled_back: false,
        state_rolled_back: false,
        blocks_removed: 0,
    };
    let mut intent = match read_intent(fs, dir)? {
        Some(i) if i.to != to => {
            return Err(refuse(RollbackRefusal::OtherInProgress {
                in_progress: i.to,
            }));
        }
        // The older tool lowered the state first: done, its block store step is left (and
        // the app's, should the app be above `to`); not done, it had written nothing but the
        // intent, which the new one replaces.
        Some(i) if i.legacy && st.height()? == to => {
            report.finished_interrupted = true;
            // Through the app step: a no-op unless the app is above `to`.
            Intent {
                to,
                step: Step::App,
                state_height_before: before.state_height,
                state: None,
                legacy: false,
            }
        }
        Some(i) if !i.legacy => {
            report.finished_interrupted = true;
            i
        }
        _ => {
            let Some(current) = state else {
                return Err(refuse(RollbackRefusal::NoState));
            };
            match classify(&observed) {
                Err(reason) => return Err(refuse(RollbackRefusal::Unrepairable(reason))),
                Ok(HandshakeCase::FlushRollForward) => {
                    return Err(refuse(RollbackRefusal::NeedsRepair {
                        record: observed.record.map_or("none".into(), |r| r.to_string()),
                    }));
                }
                Ok(_) => {}
            }
            let (b, s, a) = (
                before.block_store_height,
                before.state_height,
                before.app_height,
            );
            if to >= b && to >= s && to >= a {
                report.nothing_to_do = true;
                return Ok(report);
            }
            if to + 1 < bs.base().max(1) {
                return Err(refuse(RollbackRefusal::BelowBase { base: bs.base() }));
            }
            if a > to {
                match app.rollback_floor()? {
                    Some(lowest) if to >= lowest => {}
                    lowest => {
                        return Err(Error::AppCannotRollBack {
                            to,
                            app_height: a,
                            lowest,
                        });
                    }
                }
            }
            // Step 1: rebuild first: nothing is written if any input is missing.
            let new_state = if to < s {
                let rebuilt = chain
                    .rebuild_state(&current, to, &Stored { bs: &bs, st: &st })?
                    .map_err(|m| refuse(RollbackRefusal::StateRebuild(m)))?;
                if rebuilt.height() != to {
                    return Err(Error::Contract {
                        what: "Chain::rebuild_state(..).height()",
                        expected: to,
                        found: rebuilt.height(),
                    });
                }
                Some(RebuiltState {
                    height: to,
                    app_hash: rebuilt.app_hash(),
                    initial_height: rebuilt.initial_height(),
                    bytes: rebuilt.encode(),
                })
            } else {
                None
            };
            let intent = Intent {
                to,
                step: if a > to { Step::App } else { Step::Stores },
                state_height_before: s,
                state: new_state,
                legacy: false,
            };
            // Step 2: the intent, durable before any database changes: from here on every
            // crash leaves it, so Home::open and a rerun know a rollback is under way.
            write_intent(fs, dir, &intent)?;
            tracing::info!(
                target: "flushpoint::rollback",
                to,
                block_store_height = b,
                state_height = s,
                app_height = a,
                "rollback started"
            );
            intent
        }
    };
    if intent.step == Step::App {
        // Step 3: the app, from its own undo log (needs no block).
        if app.durable()?.height > to {
            app.rollback_to(to)?;
            report.app_rolled_back = true;
        }
        let now = app.durable()?;
        if now.height > to {
            return Err(Error::Rollback(format!(
                "the app reports height {} after rolling back to {to}",
                now.height
            )));
        }
        if let Some(s) = &intent.state
            && now.height == to
            && to >= s.initial_height
            && now.app_hash != s.app_hash
        {
            return Err(Error::AppHashMismatch {
                height: to,
                expected: hex(&s.app_hash),
                got: hex(&now.app_hash),
            });
        }
        // The app is done: from here on Home::open finishes the rollback by itself.
        intent.step = Step::Stores;
        write_intent(fs, dir, &intent)?;
    }
    drop((bs, st));
    let bs = BlockStore::<Opaque>::open(home.block_store_db.clone() as Arc<dyn Db>)?;
    let (removed, lowered) = finish_stores(home, &bs, &intent)?;
    report.blocks_removed = removed;
    report.state_rolled_back = lowered;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intent_round_trips_and_a_torn_one_is_corrupt() {
        let fs = crate::fs::SimFs::new();
        let dir = Path::new("/h");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(read_intent(&fs, dir).unwrap(), None);
        let i = Intent {
            to: 7,
            step: Step::App,
            state_height_before: 9,
            state: Some(RebuiltState {
                height: 7,
                app_hash: [3; 32],
                initial_height: 1,
                bytes: Bytes::from_static(b"a chain's state"),
            }),
            legacy: false,
        };
        write_intent(&fs, dir, &i).unwrap();
        assert_eq!(read_intent(&fs, dir).unwrap(), Some(i));
        let f = fs
            .open_file(&dir.join(ROLLBACK_INTENT_FILE), OpenMode::Existing)
            .unwrap();
        let n = f.len().unwrap();
        f.set_len(n - 1).unwrap();
        assert!(matches!(read_intent(&fs, dir), Err(Error::Corrupt { .. })));
        remove_intent(&fs, dir).unwrap();
        assert_eq!(read_intent(&fs, dir).unwrap(), None);
    }

    /// An intent that is there but cannot be opened is an error naming the home, never
    /// "no rollback in progress" (the home would open half rolled back).
    #[test]
    fn an_intent_that_cannot_be_opened_is_an_error_not_none() {
        let fs = crate::fs::SimFs::new();
        let dir = Path::new("/h");
        // A directory where the intent file is: the open fails with IsADirectory.
        fs.create_dir_all(&dir.join(ROLLBACK_INTENT_FILE)).unwrap();
        match read_intent(&fs, dir) {
            Err(Error::Home { path, op, source }) => {
                assert_eq!(path, dir);
                assert_eq!(op, "open the rollback intent");
                assert_eq!(source.kind(), std::io::ErrorKind::IsADirectory);
            }
            other => panic!("expected a home I/O error, got {other:?}"),
        }
    }

    #[test]
    fn a_legacy_text_intent_is_read_and_nothing_else_is_taken_for_one() {
        assert_eq!(legacy_target(b"12\n"), Some(12));
        // `+12`: `u64`'s parse takes a leading `+`, which the older tool never wrote.
        for bad in [
            &b"12"[..],
            b"\n",
            b"-1\n",
            b"+12\n",
            b"1 2\n",
            b"\x01\x30\n",
            b"",
        ] {
            assert_eq!(legacy_target(bad), None, "{bad:?}");
        }
        let framed = encode(
            ROLLBACK_INTENT_FILE.as_bytes(),
            &Intent {
                to: 12,
                step: Step::Stores,
                state_height_before: 12,
                state: None,
                legacy: false,
            },
        );
        assert_eq!(legacy_target(&framed), None);
    }
}
