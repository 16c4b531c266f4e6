//! The runs manifest: which run files each keyspace indexed by runs reads, newest first,
//! and the files' life — written (by an apply step or a merge), synced by the checkpoint
//! that makes their manifest rows durable, unlinked after the checkpoint that no longer
//! lists them (ADR 0014, 0016).
//!
//! * [`Manifest`], its part of the engine's state: each keyspace's readable runs (a list
//!   replaced, never changed, once a reader may hold it), the runs to sync, the next id,
//!   the runs merges replaced.
//! * [`write_run`] writes a run file and opens it; [`sync_runs`] and [`unlink_doomed_runs`]
//!   are the checkpoint's.
//!
//! Invariant: a run's id is above every run older than it (its ops' age), and ids are
//! never reused: recovery orders a keyspace's runs by id.
//! Invariant: a run is listed durably only after it and its directory were synced; a run
//! is unlinked only after a durable manifest no longer lists it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::applier::ApplyTurn;
use super::format::{VALUE_INLINE, ValueAt, runs_dir};
use super::run::{Run, RunWriter, run_file_name};
use super::state::{Core, ENGINE_NAME};
use crate::error::{Error, Result};
use crate::fs::OpenMode;

/// A keyspace's readable runs, newest first; replaced, never changed, once shared.
pub(super) type RunList = Arc<Vec<Arc<Run>>>;
/// The bytes a run's pointers lead to, per segment (a separating runs keyspace's; ADR 0016).
pub(super) type RunPointers = BTreeMap<u64, u64>;

/// A value as a run is to store it, given without building its stored form: a merge's
/// input (or a keyspace that does not separate) brings the stored bytes, an apply step in
/// a separating keyspace the value and which form it takes (ADR 0016). Why: built whole,
/// each short value would be allocated and copied once more on the applier thread.
#[derive(Debug, Clone)]
pub(super) enum RunValue {
    /// The bytes the run stores, as they are.
    Stored(Bytes),
    /// A short value, stored after [`VALUE_INLINE`].
    Inline(Bytes),
    /// A large value's place in its unit, stored as a pointer.
    Pointer(ValueAt),
}

/// An op as [`write_run`] takes it: a key and a put's value, `None` a tombstone.
pub(super) type RunOp = (Bytes, Option<RunValue>);

/// The manifest's part of the engine's state (under the state lock).
#[derive(Debug, Default)]
pub(super) struct Manifest {
    /// Keyspaces indexed by runs: name → their readable runs, newest first (ADR 0014). A
    /// run enters under the same lock as its units leave the overlay; a snapshot clones
    /// the `Arc`, and a step replaces the list rather than change one a reader holds.
    runs: HashMap<String, RunList>,
    /// Runs written since the last checkpoint, oldest first: synced, with their
    /// directories, by the next checkpoint before its commit makes their manifest rows
    /// durable.
    unsynced: Vec<(String, Arc<Run>)>,
    /// The id the next run written takes: above every run file seen on open.
    next_run_id: u64,
    /// Runs a merge replaced: unlinked after the next checkpoint, whose durable manifest
    /// no longer lists them (a reader holding one keeps its open file).
    doomed: Vec<(String, Arc<Run>)>,
}

impl Manifest {
    /// The manifest an open read: each keyspace's listed runs, and the next id.
    pub(super) fn recovered(runs: HashMap<String, RunList>, next_run_id: u64) -> Manifest {
        Manifest {
            runs,
            next_run_id,
            ..Manifest::default()
        }
    }

    /// True when `keyspace` is indexed by runs.
    pub(super) fn indexes(&self, keyspace: &str) -> bool {
        self.runs.contains_key(keyspace)
    }

    /// True when no keyspace is indexed by runs.
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The keyspaces indexed by runs, by name.
    pub(super) fn keyspaces(&self) -> Vec<String> {
        let mut names: Vec<String> = self.runs.keys().cloned().collect();
        names.sort_unstable();
        names
    }

    /// `keyspace`'s readable runs, newest first (`None`: not indexed by runs).
    pub(super) fn list(&self, keyspace: &str) -> Option<RunList> {
        self.runs.get(keyspace).cloned()
    }

    /// Every runs keyspace with its readable runs.
    pub(super) fn lists(&self) -> Vec<(String, RunList)> {
        self.runs
            .iter()
            .map(|(name, list)| (name.clone(), list.clone()))
            .collect()
    }

    /// True when some keyspace reads at least `n` runs.
    pub(super) fn any_list_at_least(&self, n: usize) -> bool {
        self.runs.values().any(|list| list.len() >= n)
    }

    /// `keyspace` is created, indexed by runs, with none yet.
    pub(super) fn add_keyspace(&mut self, keyspace: &str) {
        self.runs.insert(keyspace.to_string(), Arc::new(Vec::new()));
    }

    /// The id the next run takes (ids are never reused).
    pub(super) fn take_id(&mut self) -> u64 {
        self.next_run_id += 1;
        self.next_run_id - 1
    }

    /// True when runs were listed since the last checkpoint.
    pub(super) fn has_unsynced(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// An apply step's runs become readable, in front of their keyspaces' lists.
    pub(super) fn add_step_runs(&mut self, new_runs: Vec<(String, Arc<Run>)>) {
        for (name, run) in new_runs {
            let list = self
                .runs
                .get_mut(&name)
                .expect("invariant: a run is written for a keyspace indexed by runs");
            Arc::make_mut(list).insert(0, run.clone());
            self.unsynced.push((name, run));
        }
    }

    /// After a durable commit that followed [`sync_runs`] (which synced `synced`
    /// runs): every run written so far is listed durably and needs no sync. The caller
    /// holds the apply lock, so no run was listed since the syncs (the merger may have
    /// written one, unlisted until it takes the lock).
    pub(super) fn listed_durably(&mut self, synced: usize) {
        assert_eq!(
            self.unsynced.len(),
            synced,
            "invariant: a durable commit lists only the runs synced before it"
        );
        self.unsynced.clear();
    }

    /// A merge of `inputs` into `out` is listed: `out` takes the inputs' place in
    /// `keyspace`'s list, behind the `newer` runs in front of them; the inputs are doomed.
    pub(super) fn install(
        &mut self,
        keyspace: &str,
        inputs: Vec<Arc<Run>>,
        out: Arc<Run>,
        newer: usize,
    ) {
        let now = self
            .runs
            .get_mut(keyspace)
            .expect("invariant: a merged keyspace is indexed by runs (checked above)");
        let mut replaced = Vec::with_capacity(now.len() - inputs.len() + 1);
        // The output goes behind the runs written since the plan (`newer`): in front of
        // them, its older ops would shadow their newer ones.
        replaced.extend(now[..newer].iter().cloned());
        replaced.push(out.clone());
        replaced.extend(now[newer + inputs.len()..].iter().cloned());
        *now = Arc::new(replaced);
        let ids: BTreeSet<u64> = inputs.iter().map(|r| r.id()).collect();
        // An input not yet synced needs no sync: nothing will list it durably.
        self.unsynced
            .retain(|(n, r)| !(n == keyspace && ids.contains(&r.id())));
        self.unsynced.push((keyspace.to_string(), out));
        self.doomed
            .extend(inputs.into_iter().map(|r| (keyspace.to_string(), r)));
    }

    /// The files of the readable runs (listed or about to be), of one keyspace or of all.
    pub(super) fn paths(&self, dir: &Path, keyspace: Option<&str>) -> Vec<PathBuf> {
        self.runs
            .iter()
            .filter(|(name, _)| keyspace.is_none_or(|k| k == name.as_str()))
            .flat_map(|(name, list)| {
                list.iter()
                    .map(|r| runs_dir(dir, name).join(run_file_name(r.id())))
            })
            .collect()
    }
}

/// Writes `ops` (strictly increasing keys, at most `keys_max` of them: the room its key
/// hashes get at once) as a new run of `keyspace`, not synced, and opens it. With
/// `separating` the values are in the stored form (inline or pointer, ADR 0016), and the
/// second result is the bytes the run's pointers lead to, per segment (empty without).
/// A failure poisons the engine: the run may be partial, and is not listed.
// Crash: a cut while it is written leaves a partial run no manifest lists: the next
// open deletes it and replays the units it held.
pub(super) fn write_run(
    core: &Core,
    keyspace: &str,
    ops: impl Iterator<Item = Result<RunOp>>,
    keys_max: u64,
    separating: bool,
) -> Result<(Arc<Run>, RunPointers)> {
    let id = core.lock_state().manifest.take_id();
    write_run_as(core, keyspace, id, ops, keys_max, separating)
}

/// [`write_run`] with an id taken before ([`Manifest::take_id`]).
pub(super) fn write_run_as(
    core: &Core,
    keyspace: &str,
    id: u64,
    ops: impl Iterator<Item = Result<RunOp>>,
    keys_max: u64,
    separating: bool,
) -> Result<(Arc<Run>, RunPointers)> {
    let path = runs_dir(&core.dir, keyspace).join(run_file_name(id));
    core.step.point();
    let file = core
        .fs
        .open_file(&path, OpenMode::CreateTruncate)
        .map_err(core.failing_io("create run", &path))?;
    let mut writer = RunWriter::with_block_bytes(file, keyspace, id, core.options.run_block_bytes)
        .map_err(|e| core.fail(e))?;
    writer.reserve_keys(usize::try_from(keys_max).unwrap_or(usize::MAX));
    let mut pointers = RunPointers::new();
    for op in ops {
        let (k, v) = op.map_err(|e| core.fail(e))?;
        let at = match &v {
            Some(RunValue::Stored(stored)) if separating => {
                ValueAt::decode(stored).map_err(|reason| {
                    core.fail(Error::Corrupt {
                        db: format!("{ENGINE_NAME} run {id} of keyspace {keyspace}"),
                        key: k.to_vec(),
                        height: None,
                        reason,
                    })
                })?
            }
            Some(RunValue::Pointer(at)) => Some(*at),
            _ => None,
        };
        if let Some(at) = at {
            assert!(
                separating,
                "invariant: pointers only in a separating keyspace"
            );
            *pointers.entry(at.segment).or_default() += u64::from(at.len);
        }
        let pointer;
        let value = match &v {
            None => None,
            Some(RunValue::Stored(stored)) => Some((&[][..], &stored[..])),
            Some(RunValue::Inline(v)) => Some((&[VALUE_INLINE][..], &v[..])),
            Some(RunValue::Pointer(at)) => {
                pointer = at.encoded();
                Some((&pointer[..], &[][..]))
            }
        };
        writer.push_split(&k, value).map_err(|e| core.fail(e))?;
    }
    let meta = writer.finish().map_err(|e| core.fail(e))?;
    let file = core
        .fs
        .open_file(&path, OpenMode::Existing)
        .map_err(core.failing_io("open run", &path))?;
    let run = Run::open(file, keyspace, id).map_err(|e| core.fail(e))?;
    core.counters.runs_written.add(1);
    assert_eq!(
        run.file_bytes(),
        meta.bytes,
        "invariant: the run opened is the run written"
    );
    core.counters.run_bytes_written.add(run.file_bytes());
    Ok((Arc::new(run), pointers))
}

/// Syncs every run written since the last checkpoint, then each directory they were
/// created in; returns how many runs. Called before a durable commit (a checkpoint's, or
/// a keyspace's record), under the apply lock.
// Crash: the manifest rows of these runs become durable with the checkpoint's commit
// only, after this: a cut before the commit leaves them unlisted (deleted on open, their
// units replayed), after it listed and whole. Syncing after the commit would let a cut
// leave a listed run missing or torn: an open refused.
pub(super) fn sync_runs(core: &Core, _turn: &ApplyTurn<'_>) -> Result<usize> {
    core.poison.check(ENGINE_NAME)?;
    let unsynced = core.lock_state().manifest.unsynced.clone();
    let mut dirs = BTreeSet::new();
    for (name, run) in &unsynced {
        let path = runs_dir(&core.dir, name).join(run_file_name(run.id()));
        // Before each sync: a failure on another thread (a writer's segment sync) stops
        // the checkpoint here, not after its last run (at most the sync in flight).
        core.poison.check(ENGINE_NAME)?;
        core.step.point();
        run.sync_data()
            .map_err(core.failing_io("fsync run", &path))?;
        core.counters.run_sync_data_calls.add(1);
        dirs.insert(name.as_str());
    }
    for name in dirs {
        let kdir = runs_dir(&core.dir, name);
        core.poison.check(ENGINE_NAME)?;
        core.step.point();
        core.fs
            .sync_dir(&kdir)
            .map_err(core.failing_io("fsync directory", &kdir))?;
        core.counters.dir_sync_calls.add(1);
    }
    Ok(unsynced.len())
}

/// Unlinks the runs merges replaced: the checkpoint's durable manifest, just committed,
/// no longer lists them. Called with the apply lock held, so no merge dooms one
/// meanwhile.
// Crash: an unlink lost in a crash leaves a run no durable manifest lists: the next
// open deletes it. Unlinked before the commit, a cut would leave the old manifest
// listing a missing run: an open refused.
pub(super) fn unlink_doomed_runs(core: &Core, _turn: &ApplyTurn<'_>) -> Result<()> {
    let doomed = std::mem::take(&mut core.lock_state().manifest.doomed);
    for (name, run) in doomed {
        let path = runs_dir(&core.dir, &name).join(run_file_name(run.id()));
        core.step.point();
        match core.fs.remove_file(&path) {
            Ok(()) => core.counters.runs_deleted.add(1),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(core.fail(Error::io(ENGINE_NAME, "remove run", &path, e))),
        }
    }
    Ok(())
}
