//! Recovery at open ([`open`]): a journal directory's index, segments and runs read and
//! checked, the decision made — open, or refuse with an error naming what is wrong — and
//! only then the repairs written: replayed units synced, a torn tail truncated, leftovers
//! deleted; the engine's state built from what was found, and the replayed units applied
//! and checkpointed (ADR 0008, 0013, 0014). The segment scan and its checks are
//! `recovery.rs`'s.
//!
//! The cases, in the order they are decided:
//! * no index: a new journal (its spare prepared, its index created), unless segments or
//!   runs are there: `Corrupt` ("index missing");
//! * the index's layout, from its tables (`index.rs`): checked, or unchecked (created
//!   before pairs and rows carried a checksum), kept as it is; no journal table: a new
//!   index, which takes the checked layout (recorded once the decision is made); tables of
//!   both layouts: `Corrupt`. In the checked layout a row that fails its crc32, or a base
//!   row missing, is `Corrupt` naming `index.redb` and the row;
//! * a segment held for its values missing, a gap or a short segment below what the index
//!   applied, a listed run missing or damaged, a live row past the segments: refused;
//! * otherwise: redb at its last checkpoint, the units past it replayed, a torn tail in
//!   the last segment truncated (a zero tail kept: a prepared segment's unused space).
//!
//! Invariant: nothing is written before the decision (redb's own repair, and a new
//! journal's creation, aside); a new index's layout is written after it.
//! Invariant: a replayed unit, and the truncation, are durable before anything is applied
//! or appended: a checkpoint never covers a unit the journal could still lose.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase};

use super::applier::{Pending, Queue, UnitApplier};
use super::checkpoint::CheckpointClock;
use super::engine::Shared;
use super::format::{
    INDEX_FILE, INDEX_KIND_RUNS, LIVE, META, META_APPLIED_END_OFFSET, META_APPLIED_END_SEGMENT,
    META_APPLIED_SEQ, META_FIRST_SEGMENT, META_INDEX_PREFIX, META_SEPARATE_PREFIX, RUN_VALUES,
    RUNS, SPARE_SEGMENT_FILE, parse_run_file_name, parse_segment_file_name, runs_dir,
    segment_file_name,
};
use super::index::{IndexLayout, KeyspaceInIndex, LayoutFound, create_checked_layout, read_layout};
use super::limits::MERGER_NICE_INCREMENT_MAX;
use super::manifest::{Manifest, RunList};
use super::merger::{Merger, MergerState};
use super::options::{Counters, JournalOptions};
use super::overlay::UnitOps;
use super::recovery::{self, Recorded, Scan};
use super::run::{Run, run_file_name};
use super::segments::{SegmentMap, Segments, SpareError, WriterAt, write_spare};
use super::state::{Core, CoreParts, ENGINE_NAME, State, corrupt, io_err};
use crate::db::{CountingBackend, GuardedDrop, RedbDb, RedbGuard, RedbOptions};
use crate::error::{CorruptReason, Error, Result};
use crate::fs::{FileSystem, FsBackend, FsFile, OpenMode, create_dir_all_durably};
use crate::poison::Poison;

/// Opens (or creates) the journal in `dir` on `fs`, recovering what a crash left; the
/// engine's roles built, the replayed units applied and checkpointed. The background
/// applier is not started yet (the caller starts it).
pub(super) fn open(
    fs: Arc<dyn FileSystem>,
    dir: &Path,
    options: JournalOptions,
) -> Result<Arc<Shared>> {
    // Bad options are refused before anything is created.
    if options.merger_nice_increment > MERGER_NICE_INCREMENT_MAX {
        return Err(Error::InvalidInput(format!(
            "journal option merger_nice_increment {} is above {MERGER_NICE_INCREMENT_MAX} \
             (nice values span -20 to 19)",
            options.merger_nice_increment
        )));
    }
    create_dir_all_durably(&*fs, dir).map_err(io_err("create directory", dir))?;
    // Held for the engine's life: one engine per journal directory, whichever home
    // (or symlink) leads to it.
    let lock = recovery::lock_dir(&*fs, dir)?;
    let spare_prepared = create_if_new(&fs, dir, &options)?;
    let index = open_index(&fs, dir, &options)?;
    let layout_found = index.guard.call("read layout", || read_layout(&index.db))?;
    let layout = layout_found.layout();
    let records = read_records(&index, layout)?;
    let found = decide(&*fs, dir, &options, &index, layout, &records)?;

    // The decision is made; from here on recovery writes.
    if layout_found == LayoutFound::New {
        record_new_layout(&index)?;
    }
    let counters = Counters::default();
    let writer_at = make_replayed_durable(&*fs, dir, &found.scan, &records, &counters)?;
    remove_leftovers(
        &*fs,
        dir,
        &found,
        records.first_segment,
        spare_prepared,
        &counters,
    )?;
    let replay = found.scan.replay;
    let mut state = State {
        queue: Queue::recovered(
            options.overlay_bytes_max,
            writer_at.written_through,
            records.applied_seq,
            records.applied_end,
        ),
        segments: SegmentMap::recovered(
            found.scan.segments,
            writer_at.segment,
            records.live,
            found.held,
        ),
        manifest: Manifest::recovered(found.runs.runs, found.runs.next_id),
        merger: MergerState::default(),
        clock: CheckpointClock::recovered(records.applied_seq),
        separated: records.separated,
        stop: false,
    };
    for (header, sections, at) in replay {
        state.queue.push(Pending::new(
            header.seq,
            at,
            Arc::new(UnitOps::new(sections)),
        ));
    }
    let shared = Arc::new(Shared::new(
        Core::new(CoreParts {
            fs,
            dir: dir.to_path_buf(),
            options,
            index: index.db,
            index_guard: index.guard,
            index_counters: index.counters,
            layout,
            poison: index.poison,
            state,
            counters,
        }),
        Segments::new(writer_at, spare_prepared),
        UnitApplier::new(),
        Merger::new(),
        lock,
    ));
    let replayed = shared.core.lock_state().queue.len();
    if replayed > 0 {
        tracing::info!(
            units = replayed,
            "journal: replaying units past the checkpoint"
        );
        shared.applier.apply_step(&shared.core, true)?;
    }
    Ok(shared)
}

/// A new journal (no index): refused if it holds segments or runs; else its spare is
/// prepared (with `prepare_segments`) and its index created. Returns whether the spare
/// was prepared here.
fn create_if_new(fs: &Arc<dyn FileSystem>, dir: &Path, options: &JournalOptions) -> Result<bool> {
    let index_path = dir.join(INDEX_FILE);
    let index_exists = fs
        .exists(&index_path)
        .map_err(io_err("stat file", &index_path))?;
    if index_exists {
        return Ok(false);
    }
    // A journal that has written anything has its index: one missing beside
    // segments or runs is lost, and a new one would take them for nothing.
    if recovery::holds_journal_files(&**fs, dir)? {
        return Err(corrupt(
            &index_path,
            0,
            CorruptReason::Invalid("index missing"),
        ));
    }
    let mut spare_prepared = false;
    // A new journal's first commit rolls into the spare: it is prepared now, so that
    // the first commit does not write and sync a segment's worth of zeros (hundreds of
    // milliseconds). Before the index exists, so that a failure here leaves no open
    // database to close.
    // Crash: a cut while it is prepared leaves a partial spare and no index: the
    // next open is a new journal's again, and prepares it again.
    if options.prepare_segments {
        let spare = dir.join(SPARE_SEGMENT_FILE);
        write_spare(&**fs, &spare, options.segment_bytes, || Ok(())).map_err(|e| match e {
            SpareError::Io(op, e) => io_err(op, &spare)(e),
            SpareError::Poisoned(e) => e,
        })?;
        spare_prepared = true;
    }
    // Created atomically (temporary name, sync, rename, directory fsync).
    let redb_options = RedbOptions {
        cache_bytes: options.index_cache_bytes,
    };
    // Closed, not dropped: a failed close must fail the open, not be followed by
    // more writes and syncs on the same file.
    RedbDb::open_on(fs.clone(), &index_path, ENGINE_NAME, &redb_options)?.close()?;
    Ok(spare_prepared)
}

/// The index opened: redb over the file, fenced by the engine's poison, under its guard.
struct OpenedIndex {
    db: GuardedDrop<Database>,
    guard: Arc<RedbGuard>,
    counters: Arc<crate::db::BackendCounters>,
    poison: Arc<Poison>,
}

fn open_index(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    options: &JournalOptions,
) -> Result<OpenedIndex> {
    let index_path = dir.join(INDEX_FILE);
    let file = fs
        .open_file(&index_path, OpenMode::Existing)
        .map_err(io_err("open file", &index_path))?;
    let backend = FsBackend::new(file).map_err(|e| Error::storage(ENGINE_NAME, "open index", e))?;
    // Fenced by the engine's poison: after a failure, redb's close must not make the
    // non-durable apply steps durable (they may list runs not yet synced; ADR 0014).
    let poison = Arc::new(Poison::default());
    let guard = Arc::new(RedbGuard::new(ENGINE_NAME, Some(&index_path)).poisoning(poison.clone()));
    let counting = CountingBackend::new(backend).fenced_by(poison.clone());
    let counters = counting.counters();
    let db = guard.call("open index", || {
        Database::builder()
            .set_cache_size(options.index_cache_bytes)
            .create_with_backend(counting)
            .map_err(|e| Error::storage(ENGINE_NAME, "open index", e))
    })?;
    let db = GuardedDrop::new(guard.clone(), "close index", db);
    Ok(OpenedIndex {
        db,
        guard,
        counters,
        poison,
    })
}

/// Records the checked layout in a new index ([`LayoutFound::New`]): its meta table and base
/// rows, in one commit with `Durability::None`, made durable by the index's first durable
/// commit (a keyspace's record, a checkpoint, the close). A failure fences the index.
fn record_new_layout(index: &OpenedIndex) -> Result<()> {
    // Crash: a cut before a durable commit covers this one leaves an index with no journal
    // table and no row: the next open finds it new again and records the layout again.
    let recorded = index.guard.call("record layout", || {
        let fail = |e: redb::Error| Error::storage(ENGINE_NAME, "record layout", e);
        let mut txn = index.db.begin_write().map_err(|e| fail(e.into()))?;
        txn.set_durability(redb::Durability::None)
            .map_err(|e| fail(e.into()))?;
        create_checked_layout(&txn).map_err(fail)?;
        txn.commit().map_err(|e| fail(e.into()))
    });
    if let Err(e) = &recorded {
        index.poison.set(e);
    }
    recorded
}

/// What the index records of the journal at its last checkpoint.
struct IndexRecords {
    applied_seq: u64,
    first_segment: u64,
    applied_end: (u64, u64),
    /// Per segment with applied units, where the last applied unit in it ends.
    ends: BTreeMap<u64, u64>,
    separated: HashMap<String, u64>,
    live: BTreeMap<u64, u64>,
}

fn read_records(index: &OpenedIndex, layout: IndexLayout) -> Result<IndexRecords> {
    let (guard, db) = (&index.guard, &index.db);
    let (applied_seq, first_segment, applied_end) =
        guard.call("read meta", || read_meta(db, layout))?;
    let ends = guard.call("read segment ends", || {
        recovery::read_segment_ends(db, layout, applied_end)
    })?;
    let (separated, live) = guard.call("read meta", || read_values_meta(db, layout))?;
    guard.call("read run values", || check_run_values(db, layout))?;
    Ok(IndexRecords {
        applied_seq,
        first_segment,
        applied_end,
        ends,
        separated,
        live,
    })
}

/// What the checks found: the segment files there, those held below the checkpoint, the
/// scan of the live ones, and the runs.
struct Found {
    on_disk: BTreeSet<u64>,
    held: BTreeSet<u64>,
    scan: Scan,
    runs: OpenedRuns,
}

/// The open's decision: every check of the files against the index, reads only; `Err`
/// refuses the journal.
fn decide(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &JournalOptions,
    index: &OpenedIndex,
    layout: IndexLayout,
    records: &IndexRecords,
) -> Result<Found> {
    let first_segment = records.first_segment;
    // The segment files there, listed once: the checks below, the scan and the removal
    // of leftovers all read this listing (nothing creates a segment before the last).
    let on_disk: BTreeSet<u64> = fs
        .list_dir(dir)
        .map_err(io_err("list directory", dir))?
        .iter()
        .filter_map(|name| parse_segment_file_name(name))
        .collect();
    // Segments below the checkpoint kept for their values must all be there.
    let held: BTreeSet<u64> = records
        .live
        .range(..first_segment)
        .map(|(i, _)| *i)
        .collect();
    if let Some(&i) = held.difference(&on_disk).next() {
        return Err(corrupt(
            &dir.join(segment_file_name(i)),
            0,
            CorruptReason::Invalid("segment holding indexed values missing"),
        ));
    }
    let scan = recovery::scan(
        fs,
        dir,
        &on_disk,
        Recorded {
            applied_seq: records.applied_seq,
            first_segment,
            ends: &records.ends,
            segment_bytes: options.segment_bytes,
        },
    )?;
    // Every segment the index applied units in is there and reaches their end.
    recovery::check_recorded_segments(
        fs,
        dir,
        &records.ends,
        first_segment,
        &held,
        &scan.segments,
        records.applied_seq,
    )?;
    // Every run the manifest lists is there and whole (reads only; ADR 0014).
    let runs_meta = index
        .guard
        .call("read runs", || read_runs_meta(&index.db, layout))?;
    let runs = open_runs(fs, dir, runs_meta)?;
    // Every segment a live row names is held (checked above) or read by the scan: a
    // row past a gap would point into a number the next roll reuses.
    if let Some((&i, _)) = records
        .live
        .range(first_segment..)
        .find(|(i, _)| !scan.segments.contains_key(i))
    {
        return Err(corrupt(
            &dir.join(segment_file_name(i)),
            0,
            CorruptReason::Invalid("segment holding indexed values missing"),
        ));
    }
    Ok(Found {
        on_disk,
        held,
        scan,
        runs,
    })
}

/// Syncs every segment holding a replayed unit and truncates a torn tail; returns where
/// the writer goes on (the last segment opened at the end of its valid units).
fn make_replayed_durable(
    fs: &dyn FileSystem,
    dir: &Path,
    scan: &Scan,
    records: &IndexRecords,
    counters: &Counters,
) -> Result<WriterAt> {
    let mut at = WriterAt {
        file: None,
        segment: records.first_segment,
        offset: 0,
        prepared_end: 0,
        written_through: records.applied_seq.max(scan.last_seq),
    };
    // Crash: a replayed unit may be in the page cache only (written by the process that
    // crashed, never synced). Applied and checkpointed so, a power cut after this open
    // would leave a checkpoint past what the segment holds. Every segment holding one
    // is synced first: the earlier ones here, the last one below with its truncation.
    let last_index = scan.last.as_ref().map(|l| l.index);
    let replayed_in: BTreeSet<u64> = scan.replay.iter().map(|(_, _, at)| at.0).collect();
    for &index in replayed_in.iter().filter(|i| Some(**i) != last_index) {
        let path = dir.join(segment_file_name(index));
        fs.open_file(&path, OpenMode::Existing)
            .and_then(|f| f.sync_data())
            .map_err(io_err("fsync segment", &path))?;
        counters.journal_sync_data_calls.add(1);
    }
    if let Some(last) = &scan.last {
        let path = dir.join(segment_file_name(last.index));
        let f: Box<dyn FsFile> = fs
            .open_file(&path, OpenMode::Existing)
            .map_err(io_err("open segment", &path))?;
        // A tail of zeros is a prepared segment's unused space (nothing of a unit
        // landed there, or only zero bytes of a torn one — never acknowledged): kept,
        // and written over by the next units.
        if last.valid_len < last.file_len && !last.zero_tail {
            tracing::warn!(
                segment = %path.display(),
                offset = last.valid_len,
                discarded_bytes = last.file_len - last.valid_len,
                "journal: torn tail truncated"
            );
            f.set_len(last.valid_len)
                .map_err(io_err("truncate segment", &path))?;
        }
        // Replayed units and the truncation are durable before anything is applied or
        // appended: a checkpoint must never cover a unit the journal could still lose.
        // Crash: without it, a cut after this open's checkpoint loses the replayed units
        // the checkpoint covers (the next open refuses the journal as cut short).
        f.sync_data().map_err(io_err("fsync segment", &path))?;
        counters.journal_sync_data_calls.add(1);
        at.file = Some(f);
        at.offset = last.valid_len;
        at.prepared_end = if last.zero_tail {
            last.file_len
        } else {
            last.valid_len
        };
        at.segment = last.index;
    }
    Ok(at)
}

/// Deletes what no durable record holds: segments below the checkpointed first segment
/// that no pointer holds, runs no manifest lists, and a spare a crash left (not the one
/// this open prepared); creates the runs directories a keyspace's record names.
fn remove_leftovers(
    fs: &dyn FileSystem,
    dir: &Path,
    found: &Found,
    first_segment: u64,
    spare_prepared: bool,
    counters: &Counters,
) -> Result<()> {
    // Leftovers below the checkpointed first segment that no pointer holds (an unlink
    // lost in a crash, or a trim the crash came before).
    for &index in found.on_disk.range(..first_segment) {
        if !found.held.contains(&index) {
            let path = dir.join(segment_file_name(index));
            remove_if_there(fs, &path, "remove segment")?;
        }
    }
    // Runs no durable manifest lists: written by an apply step or a checkpoint's syncs
    // that the crash came before. Their units are replayed below, into new runs.
    // Crash: an unlink lost here leaves an unlisted run: the next open deletes it.
    for path in &found.runs.unlisted {
        remove_if_there(fs, path, "remove run")?;
    }
    for d in &found.runs.missing_dirs {
        create_dir_all_durably(fs, d).map_err(io_err("create directory", d))?;
    }
    // A spare left by a crash may be partly zeroed: prepared again when needed. Not the
    // one this open prepared.
    if spare_prepared {
        counters.segments_prepared.add(1);
    } else {
        let spare = dir.join(SPARE_SEGMENT_FILE);
        remove_if_there(fs, &spare, "remove spare segment")?;
    }
    Ok(())
}

/// Removes `path`; one already gone is not an error.
fn remove_if_there(fs: &dyn FileSystem, path: &Path, op: &'static str) -> Result<()> {
    match fs.remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(op, path)(e)),
    }
}

/// `applied_seq`, `first_segment` and where the last checkpointed unit ends (`(0, 0)`
/// when not recorded: a journal from before the key, or nothing applied). In the checked
/// layout each row is checked, and one missing is `Corrupt` (a checked index holds them
/// from its creation); an index with no meta table (a new one) reads all four as 0.
fn read_meta(index: &Database, layout: IndexLayout) -> Result<(u64, u64, (u64, u64))> {
    let txn = index
        .begin_read()
        .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))?;
    let Some(table) = META
        .open_read(&txn, layout)
        .map_err(|e| Error::storage(ENGINE_NAME, "open meta", e))?
    else {
        return Ok((0, 0, (0, 0)));
    };
    let get = |k: &str| -> Result<u64> {
        match table.get(&k, "read meta")? {
            Some(v) => Ok(v),
            None if layout == IndexLayout::Checked => Err(Error::Corrupt {
                db: format!("{ENGINE_NAME} {INDEX_FILE}, table {}", META.checked_name),
                key: k.as_bytes().to_vec(),
                height: None,
                reason: CorruptReason::Invalid("a row every checked index holds is missing"),
            }),
            None => Ok(0),
        }
    };
    Ok((
        get(META_APPLIED_SEQ)?,
        get(META_FIRST_SEGMENT)?,
        (
            get(META_APPLIED_END_SEGMENT)?,
            get(META_APPLIED_END_OFFSET)?,
        ),
    ))
}

/// The separating keyspaces (name → threshold) and the live bytes per segment.
fn read_values_meta(
    index: &Database,
    layout: IndexLayout,
) -> Result<(HashMap<String, u64>, BTreeMap<u64, u64>)> {
    let txn = index
        .begin_read()
        .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))?;
    let separated = meta_rows_with_prefix(&txn, layout, META_SEPARATE_PREFIX)?
        .into_iter()
        .collect();
    let live = match LIVE
        .open_read(&txn, layout)
        .map_err(|e| Error::storage(ENGINE_NAME, "open live", e))?
    {
        Some(t) => t.all("read live", |segment| segment)?.into_iter().collect(),
        None => BTreeMap::new(),
    };
    Ok((separated, live))
}

/// In the checked layout, every `journal.run_values` row checked: a merge lowers the live
/// bytes by them, so a damaged one is refused at open rather than by the merge that would
/// act on it. Recovery reads nothing else of them.
fn check_run_values(index: &Database, layout: IndexLayout) -> Result<()> {
    if layout == IndexLayout::Unchecked {
        return Ok(());
    }
    let txn = index
        .begin_read()
        .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))?;
    if let Some(t) = RUN_VALUES
        .open_read(&txn, layout)
        .map_err(|e| Error::storage(ENGINE_NAME, "open run values", e))?
    {
        t.all("read run values", |_| ())?;
    }
    Ok(())
}

/// The `journal.meta` rows whose key starts with `prefix`: (the rest of the key, value).
fn meta_rows_with_prefix(
    txn: &redb::ReadTransaction,
    layout: IndexLayout,
    prefix: &str,
) -> Result<Vec<(String, u64)>> {
    let Some(t) = META
        .open_read(txn, layout)
        .map_err(|e| Error::storage(ENGINE_NAME, "open meta", e))?
    else {
        return Ok(Vec::new());
    };
    t.rows_in(prefix.., "read meta", |k| {
        k.strip_prefix(prefix).map(str::to_string)
    })
}

/// The keyspaces indexed by runs (from `journal.meta`), and the runs the durable manifest
/// lists for each, by id.
#[derive(Debug, Default)]
struct RunsMeta {
    kinds: BTreeSet<String>,
    listed: BTreeMap<String, BTreeSet<u64>>,
}

fn read_runs_meta(index: &Database, layout: IndexLayout) -> Result<RunsMeta> {
    let txn = index
        .begin_read()
        .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))?;
    let mut out = RunsMeta::default();
    for (name, kind) in meta_rows_with_prefix(&txn, layout, META_INDEX_PREFIX)? {
        if kind != INDEX_KIND_RUNS {
            return Err(Error::Corrupt {
                db: KeyspaceInIndex(&name).to_string(),
                key: format!("{META_INDEX_PREFIX}{name}").into_bytes(),
                height: None,
                reason: CorruptReason::Invalid("unknown keyspace index kind"),
            });
        }
        out.kinds.insert(name);
    }
    if let Some(t) = RUNS
        .open_read(&txn, layout)
        .map_err(|e| Error::storage(ENGINE_NAME, "open runs", e))?
    {
        for ((name, id), _level) in t.all("read runs", |(name, id)| (name.to_string(), id))? {
            out.listed.entry(name).or_default().insert(id);
        }
    }
    Ok(out)
}

/// What recovery found of the runs: the listed ones opened, newest first, per keyspace;
/// the files no manifest lists (deleted once the open's decision is made); the directories
/// to create (a keyspace whose creation record was durable and whose directory was not
/// found: it lists no run); the next run id.
#[derive(Debug, Default)]
struct OpenedRuns {
    runs: HashMap<String, RunList>,
    unlisted: Vec<PathBuf>,
    missing_dirs: Vec<PathBuf>,
    next_id: u64,
}

/// Opens every run `meta` lists: a listed run missing, or failing its checks
/// ([`Run::open`]), refuses the open with [`Error::Corrupt`] naming it. Reads only.
fn open_runs(fs: &dyn FileSystem, dir: &Path, meta: RunsMeta) -> Result<OpenedRuns> {
    let mut out = OpenedRuns::default();
    if let Some(name) = meta.listed.keys().find(|n| !meta.kinds.contains(*n)) {
        return Err(Error::Corrupt {
            db: KeyspaceInIndex(name).to_string(),
            key: Vec::new(),
            height: None,
            reason: CorruptReason::Invalid("runs listed for a keyspace not indexed by runs"),
        });
    }
    let mut max_id = None;
    for name in &meta.kinds {
        let kdir = runs_dir(dir, name);
        let listed = meta.listed.get(name).cloned().unwrap_or_default();
        let names = if fs.exists(&kdir).map_err(io_err("stat file", &kdir))? {
            fs.list_dir(&kdir)
                .map_err(io_err("list directory", &kdir))?
        } else {
            out.missing_dirs.push(kdir.clone());
            Vec::new()
        };
        for file_name in names {
            let Some(id) = parse_run_file_name(&file_name) else {
                continue;
            };
            max_id = max_id.max(Some(id));
            if !listed.contains(&id) {
                out.unlisted.push(kdir.join(&file_name));
            }
        }
        let mut runs = Vec::with_capacity(listed.len());
        // Newest first: a run's id is above every run older than it (ADR 0014).
        for &id in listed.iter().rev() {
            max_id = max_id.max(Some(id));
            let path = kdir.join(run_file_name(id));
            let file = match fs.open_file(&path, OpenMode::Existing) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(Error::Corrupt {
                        db: format!("{name} run {id} ({})", path.display()),
                        key: Vec::new(),
                        height: None,
                        reason: CorruptReason::Invalid("a run the manifest lists is missing"),
                    });
                }
                Err(e) => return Err(io_err("open run", &path)(e)),
            };
            runs.push(Arc::new(Run::open(file, name, id)?));
        }
        out.runs.insert(name.clone(), Arc::new(runs));
    }
    out.next_id = max_id.map_or(0, |m| m + 1);
    Ok(out)
}
