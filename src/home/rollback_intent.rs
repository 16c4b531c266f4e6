//! The rollback intent: the file a rollback keeps in the home while it runs, and the
//! finishing of its store steps, which needs no chain and no app — so [`Home::open`]
//! finishes an interrupted rollback by itself ([`crate::rollback`] has the steps and the
//! crash table; ADR 0006).
//!
//! Invariant: every file operation goes through the home's [`FileSystem`]. Invariant: the
//! intent is durable before the first database write of a rollback and removed only after
//! its last; while it exists no node starts on the home.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::chain::{Chain, ChainBlock, ChainCommit, ChainResults, ChainState};
use crate::codec::{Reader, RecordKind, Writer};
use crate::db::Db;
use crate::error::{CorruptReason, Error, Result};
use crate::fs::{FileSystem, OpenMode, StdFs};
use crate::store::{BlockStore, StateStore};
use crate::types::{Hash, Record, decode, encode};

use super::Home;

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
pub(crate) enum Step {
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
pub(crate) struct RebuiltState {
    /// Its height (= the rollback's target).
    pub(crate) height: u64,
    /// Its app hash (checked against the app's after the app step).
    pub(crate) app_hash: Hash,
    /// Its initial height.
    pub(crate) initial_height: u64,
    /// [`ChainState::encode`]'s bytes.
    pub(crate) bytes: Bytes,
}

/// Intent payload flag: no state to lower. (1 was an older build's typed state, refused.)
const INTENT_NO_STATE: u8 = 0;
/// Intent payload flag: a [`RebuiltState`] follows.
const INTENT_STATE: u8 = 2;

/// The intent file's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Intent {
    pub(crate) to: u64,
    pub(crate) step: Step,
    /// The state's height when the rollback started (reported when a home is refused).
    pub(crate) state_height_before: u64,
    /// The state at `to`, when the state must be lowered to it.
    pub(crate) state: Option<RebuiltState>,
    /// Written by the tool before the rollback moved into the library: the text `to\n`.
    /// That tool lowered the state, then the block store, and never the app.
    pub(crate) legacy: bool,
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

fn home_io(dir: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    let path = dir.to_path_buf();
    move |source| Error::Home { path, op, source }
}

/// Reads the intent file, if there is one. A torn or foreign one is `Error::Corrupt`.
pub(crate) fn read_intent(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Intent>> {
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
pub(crate) fn legacy_target(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes.strip_suffix(b"\n")?).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Writes the intent durably: temporary file, fsync, rename, directory fsync.
pub(crate) fn write_intent(fs: &dyn FileSystem, dir: &Path, intent: &Intent) -> Result<()> {
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
pub(crate) fn remove_intent(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    fs.remove_file(&dir.join(ROLLBACK_INTENT_FILE))
        .map_err(home_io(dir, "remove the rollback intent"))?;
    fs.sync_dir(dir)
        .map_err(home_io(dir, "fsync the home directory"))
}

/// The chain of a rollback's store steps, which decode no block, commit, state or results
/// (they read the block store's range and metas and write the intent's state bytes):
/// finishing a rollback needs no chain types, so [`Home::open`] can do it. Every decode of
/// it fails, so a read it was not meant to make is reported, never misread. It has no
/// values (an enum without variants): since no decode makes one and no step is given one,
/// each method below is unreachable, which the compiler checks (`match *self {}`).
#[derive(Debug, Clone)]
pub(crate) enum Opaque {}

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

/// The target of the rollback a crash interrupted in `home`, if any.
pub fn pending_rollback(home: &Home) -> Result<Option<u64>> {
    Ok(read_intent(home.fs(), home.path())?.map(|i| i.to))
}

impl Home {
    /// Opens an existing home for [`rollback`](crate::rollback()) on the real file system: as
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
pub(crate) fn finish_stores(
    home: &Home,
    bs: &BlockStore<Opaque>,
    intent: &Intent,
) -> Result<(u64, bool)> {
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
