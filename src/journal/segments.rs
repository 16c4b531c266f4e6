//! The segments: the files units are appended to, and the space they take (ADR 0008, 0013).
//!
//! * [`Segments`] owns the writer's lock ([`Writer`]: the active segment, the next seq) and
//!   the spare's ([`Segments::spare_ready`]): it appends units, syncs them, rolls to a new
//!   segment (a created one, or the prepared spare renamed in) and prepares the next
//!   spare.
//! * [`SegmentMap`], its part of the engine's state, knows every segment: the live ones
//!   with the seq of their first unit, those held below the checkpoint for the values in
//!   them, the doomed ones waiting for readers' pins to go, the live bytes per segment.
//! * The trim: [`punch_dead_space`] gives back a held segment's space around its values,
//!   [`unlink_doomed`] deletes the segments no reader can still point into.
//!
//! Invariant: a unit is durable exactly when a `sync_data` of its segment returned `Ok`
//! after it was written; a failed write or sync poisons the engine and is never retried.
//! Invariant: a segment is rolled only after the outgoing one is synced, and a new
//! segment's name is durable (directory fsync) before any unit in it is acknowledged.
//! Invariant: a segment is deleted only after a durable checkpoint records a
//! `first_segment` above it **and** no value pointer in it, and only once no reader holds
//! a snapshot older than that checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::format::SPARE_SEGMENT_FILE;
use super::limits::{PUNCH_BLOCK_BYTES, SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL, ZERO_CHUNK_BYTES};
use super::options::{Applier, Counters};
use super::state::{Core, ENGINE_NAME};
use super::unit::{self, Sections};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, FsFile, OpenMode};
use crate::sync::{Mutex, MutexGuard};

/// The active segment and the seqs written and synced: held across a unit's append and
/// sync, so units reach the file, and the overlay, in seq order.
#[derive(Debug)]
pub(super) struct Writer {
    /// The active segment, once one exists.
    file: Option<Box<dyn FsFile>>,
    segment: u64,
    offset: u64,
    /// Where the active segment's prepared zeros end: appends below it overwrite written
    /// blocks and change no file size. `segment_bytes` for a spare renamed in, 0 for a
    /// created segment, the file's length for one reopened. Decides early rolls only (a
    /// speed matter: recovery reads any segment the same way).
    prepared_end: u64,
    /// Small synced units written in a row, this one counted once `append` has seen it
    /// ([`SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL`]); a unit of at least the bound sets it to 0.
    small_synced_streak: u32,
    next_seq: u64,
    written_through: u64,
    synced_through: u64,
}

/// Where an open leaves the writer: the last segment, if any, opened at the end of its
/// valid units.
pub(super) struct WriterAt {
    pub(super) file: Option<Box<dyn FsFile>>,
    pub(super) segment: u64,
    pub(super) offset: u64,
    pub(super) prepared_end: u64,
    /// Every unit up to this seq is written (and, after the open's syncs, durable).
    pub(super) written_through: u64,
}

impl Writer {
    pub(super) fn new(at: WriterAt) -> Writer {
        Writer {
            file: at.file,
            segment: at.segment,
            offset: at.offset,
            prepared_end: at.prepared_end,
            small_synced_streak: 0,
            next_seq: at.written_through + 1,
            written_through: at.written_through,
            synced_through: at.written_through,
        }
    }

    /// The seq the next unit takes.
    pub(super) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The active segment.
    pub(super) fn segment(&self) -> u64 {
        self.segment
    }

    /// The last unit written (synced or not).
    pub(super) fn written_through(&self) -> u64 {
        self.written_through
    }

    /// True when units were written since the last sync.
    pub(super) fn has_unsynced(&self) -> bool {
        self.synced_through < self.written_through
    }

    /// Unit `seq` is written and (if synced) durable: the next unit takes the seq after it.
    pub(super) fn finished(&mut self, seq: u64) {
        self.next_seq = seq + 1;
    }

    /// One `sync_data` of the active segment: every unit written so far is durable after
    /// it. A failure poisons the engine; it is never retried.
    pub(super) fn sync(&mut self, core: &Core) -> Result<()> {
        // Never after a failure: a sync that follows a failed one could report as durable
        // bytes the failed one lost (fsyncgate).
        core.poison.check(ENGINE_NAME)?;
        let path = core.segment_path(self.segment);
        if let Some(f) = &self.file {
            f.sync_data()
                .map_err(core.failing_io("fsync segment", &path))?;
            core.counters.journal_sync_data_calls.add(1);
        }
        self.synced_through = self.written_through;
        let mut st = core.lock_state();
        st.queue.note_durable(self.written_through);
        drop(st);
        core.changed.notify_all();
        Ok(())
    }
}

/// The segments' part of the engine's state (under the state lock).
#[derive(Debug, Default)]
pub(super) struct SegmentMap {
    /// Live segments: index → seq of the first unit in it (or to be written to it).
    segments: BTreeMap<u64, u64>,
    active_segment: u64,
    /// Segment → bytes of values in it the applied index points at (entries only > 0).
    live: BTreeMap<u64, u64>,
    /// Segments below the checkpointed first segment, kept for the values in them.
    held: BTreeSet<u64>,
    /// Segments checkpointed with no pointer into them, not yet unlinked: (the trim
    /// epoch they were doomed in, segment).
    doomed: Vec<(u64, u64)>,
    /// Bumped after each trim that dooms segments.
    epoch: u64,
    /// Readers of separating keyspaces: the epoch of their snapshot → how many.
    pins: BTreeMap<u64, usize>,
    /// Per segment whose every unit was applied by this process (its first unit, at offset
    /// 0, included): where the values kept in it lie (offset, length). What is not one of
    /// them is dead once the segment is held, and is given back then.
    value_ranges: BTreeMap<u64, Vec<(u64, u64)>>,
}

/// What a checkpoint will retire ([`SegmentMap::plan_trim`]).
pub(super) struct TrimPlan {
    /// The first segment still needed for replay: recorded by the checkpoint.
    pub(super) first_needed: u64,
    /// Segments leaving with no pointer into them: their recorded ends go.
    pub(super) retired: Vec<u64>,
}

impl SegmentMap {
    /// The map an open found: the live `segments` (index → first seq), the `active` one,
    /// the `live` bytes per segment and the `held` segments below the checkpoint.
    pub(super) fn recovered(
        segments: BTreeMap<u64, u64>,
        active: u64,
        live: BTreeMap<u64, u64>,
        held: BTreeSet<u64>,
    ) -> SegmentMap {
        SegmentMap {
            segments,
            active_segment: active,
            live,
            held,
            ..SegmentMap::default()
        }
    }

    /// Segment `index` is created (or renamed in) for unit `seq` and is now the active one.
    fn rolled(&mut self, index: u64, seq: u64) {
        self.segments.insert(index, seq);
        self.active_segment = index;
    }

    /// Takes the live bytes a commit wrote into the map (0: no pointer left).
    pub(super) fn note_live(&mut self, live_now: Vec<(u64, u64)>) {
        for (segment, bytes) in live_now {
            if bytes == 0 {
                self.live.remove(&segment);
            } else {
                self.live.insert(segment, bytes);
            }
        }
    }

    /// After an apply step: `started` are the segments whose first unit it applied, and
    /// `value_ranges` (segment, offset, length) where the values it kept in the journal lie.
    pub(super) fn note_applied(&mut self, started: Vec<u64>, value_ranges: Vec<(u64, u64, u64)>) {
        for segment in started {
            self.value_ranges.entry(segment).or_default();
        }
        for (segment, offset, len) in value_ranges {
            // Only for a segment seen from its first unit: else some of its values are
            // unknown here, and nothing of it may be given back.
            if let Some(ranges) = self.value_ranges.get_mut(&segment) {
                ranges.push((offset, len));
            }
        }
    }

    /// What a checkpoint recording `applied_seq` retires: the first segment it still needs,
    /// and the segments it retires with no pointer into them.
    pub(super) fn plan_trim(&self, applied_seq: u64) -> TrimPlan {
        let segs: Vec<(u64, u64)> = self.segments.iter().map(|(i, s)| (*i, *s)).collect();
        // Segment i is wholly applied when it is not the active one and the next one's
        // first unit follows everything in it that redb holds.
        let mut first_needed = self.active_segment;
        for pair in segs.windows(2) {
            let ((index, _), (_, next_first_seq)) = (pair[0], pair[1]);
            if next_first_seq - 1 > applied_seq {
                first_needed = index;
                break;
            }
        }
        // Segments this checkpoint retires with no pointer into them: their recorded
        // ends go with it (the live counts do not change meanwhile: the apply lock is
        // held).
        let retired: Vec<u64> = self
            .segments
            .range(..first_needed)
            .map(|(i, _)| *i)
            .chain(self.held.iter().copied())
            .filter(|i| !self.live.contains_key(i))
            .collect();
        TrimPlan {
            first_needed,
            retired,
        }
    }

    /// After the checkpoint recording `first_needed` is durable: the segments below it are
    /// held (kept for their values) or doomed (no pointer into them); returns the newly
    /// held ones whose dead space can be given back, with their values' ranges.
    pub(super) fn retire_below(
        &mut self,
        first_needed: u64,
        counters: &Counters,
    ) -> Vec<(u64, Vec<(u64, u64)>)> {
        let below: Vec<u64> = self
            .segments
            .range(..first_needed)
            .map(|(i, _)| *i)
            .collect();
        self.segments.retain(|i, _| *i >= first_needed);
        self.held.extend(below.iter().copied());
        // The live counts are the ones this checkpoint made durable (the apply lock is
        // held): a segment below the first needed with no pointer into it is done.
        let done: Vec<u64> = self
            .held
            .iter()
            .copied()
            .filter(|i| !self.live.contains_key(i))
            .collect();
        let kept = self.held.len() - done.len();
        counters.segments_kept_for_values.add(kept as u64);
        // A segment newly held gives back the space its kept values do not use.
        let newly_held: Vec<u64> = below
            .into_iter()
            .filter(|i| self.live.contains_key(i))
            .collect();
        let punch: Vec<(u64, Vec<(u64, u64)>)> = newly_held
            .into_iter()
            .filter_map(|i| self.value_ranges.remove(&i).map(|r| (i, r)))
            .collect();
        if !done.is_empty() {
            let epoch = self.epoch;
            for i in done {
                self.held.remove(&i);
                self.value_ranges.remove(&i);
                self.doomed.push((epoch, i));
            }
            // Snapshots taken from now on were begun after this commit: no pointer
            // into a doomed segment is in them.
            self.epoch += 1;
        }
        punch
    }

    /// A reader of a separating keyspace pins the current trim epoch; returns it.
    pub(super) fn pin(&mut self) -> u64 {
        let epoch = self.epoch;
        *self.pins.entry(epoch).or_default() += 1;
        epoch
    }

    /// A reader lets its pin on `epoch` go; returns true when doomed segments wait.
    pub(super) fn unpin(&mut self, epoch: u64) -> bool {
        let n = self
            .pins
            .get_mut(&epoch)
            .expect("invariant: a pin is counted");
        *n -= 1;
        if *n == 0 {
            self.pins.remove(&epoch);
        }
        !self.doomed.is_empty()
    }

    /// Takes the doomed segments no reader's pin is at or before the epoch of.
    fn take_unlinkable(&mut self) -> Vec<u64> {
        let oldest_pin = self.pins.keys().next().copied();
        let (ready, wait): (Vec<_>, Vec<_>) = self
            .doomed
            .iter()
            .partition(|(epoch, _)| oldest_pin.is_none_or(|p| p > *epoch));
        self.doomed = wait;
        ready.into_iter().map(|(_, i)| i).collect()
    }

    /// Every segment with a file: live, held or doomed.
    pub(super) fn all_files(&self) -> Vec<u64> {
        self.segments
            .keys()
            .chain(self.held.iter())
            .chain(self.doomed.iter().map(|(_, i)| i))
            .copied()
            .collect()
    }

    /// The held segments.
    pub(super) fn held_files(&self) -> Vec<u64> {
        self.held.iter().copied().collect()
    }

    /// The live and doomed segments.
    pub(super) fn other_files(&self) -> Vec<u64> {
        self.segments
            .keys()
            .chain(self.doomed.iter().map(|(_, i)| i))
            .copied()
            .collect()
    }
}

/// A unit for [`Segments::append`]: its seq, its encoded length (`unit::encoded_len`),
/// whether a sync follows it, and its sections.
pub(super) struct UnitToAppend<'a> {
    pub(super) seq: u64,
    pub(super) len: u64,
    pub(super) synced: bool,
    pub(super) sections: &'a Sections,
}

/// The writer's lock and the spare's; see the module's docs.
#[derive(Debug)]
pub(super) struct Segments {
    writer: Mutex<Writer>,
    /// True when the spare segment is prepared (zeros durable). Held while one is being
    /// prepared, so a roll waits for it rather than race it.
    spare_ready: Mutex<bool>,
}

impl Segments {
    /// The writer `at`, with a spare already prepared or not.
    pub(super) fn new(at: WriterAt, spare_prepared: bool) -> Segments {
        Segments {
            writer: Mutex::new(Writer::new(at)),
            spare_ready: Mutex::new(spare_prepared),
        }
    }

    /// The writer's lock (outermost of the engine's locks).
    pub(super) fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().expect("journal writer lock")
    }

    /// Appends `unit` (unit `seq`) to the active segment, rolling to a new one first when
    /// it would pass the segment size, or early, into a ready spare, when a small synced
    /// unit that ends a run of [`SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL`] would grow a segment
    /// that is not prepared; the unit is `len` bytes
    /// (`unit::encoded_len`), encoded as it is written, in chunks. `placed` is called with
    /// the unit's segment and offset once they are known, before its first byte is
    /// written. Returns the unit's offset in `w.segment`.
    pub(super) fn append(
        &self,
        core: &Core,
        w: &mut Writer,
        unit: UnitToAppend<'_>,
        placed: impl FnOnce(u64, u64),
    ) -> Result<u64> {
        let UnitToAppend {
            seq,
            len,
            synced,
            sections,
        } = unit;
        // What the header says was durable when the unit was written: as before a roll's
        // sync (true either way; recovery only trusts it for units before this one).
        let synced_through = w.synced_through;
        // A consensus-sized synced unit: its sync is cheaper over prepared zeros.
        let small = len < core.options.prepared_units_below_bytes;
        let wants_prepared = core.options.prepare_segments && synced && small;
        if !small {
            w.small_synced_streak = 0;
        } else if synced {
            w.small_synced_streak = w.small_synced_streak.saturating_add(1);
        }
        let roll = match w.file {
            None => true,
            Some(_) if w.offset == 0 => false,
            Some(_) if w.offset + len > core.options.segment_bytes => true,
            // Early: the segment's prepared zeros end before this unit does (a segment a
            // flush point created), this unit ends a run of small synced ones, and a spare
            // is ready; never waited for, except inline, where the writer prepares every
            // spare itself.
            Some(_) => {
                wants_prepared
                    && w.offset + len > w.prepared_end
                    && w.small_synced_streak >= SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL
                    && (core.options.applier == Applier::Inline
                        || self.spare_ready.try_lock().is_ok_and(|ready| *ready))
            }
        };
        if roll {
            self.roll(core, w, seq, wants_prepared)?;
        }
        placed(w.segment, w.offset);
        let path = core.segment_path(w.segment);
        let file = w
            .file
            .as_ref()
            .expect("invariant: a segment is open after a roll");
        // Crash: a cut between two vectored writes, or inside one (a `pwritev` is not
        // atomic either), leaves a prefix of the unit, a torn tail to recovery (its body
        // crc32 fails); the unit is acknowledged only after a sync that follows its last
        // piece.
        let mut next = w.offset;
        unit::encode_in_chunks(
            seq,
            synced_through,
            sections,
            unit::ENCODE_CHUNK_BYTES,
            |pieces| {
                file.write_vectored_at(next, pieces)?;
                next += pieces.iter().map(|p| p.len() as u64).sum::<u64>();
                Ok(())
            },
        )
        .expect("invariant: the length was checked by encoded_len")
        .map_err(core.failing_io("append unit", &path))?;
        assert_eq!(
            next,
            w.offset + len,
            "invariant: the unit is encoded_len bytes"
        );
        let at = w.offset;
        w.offset += len;
        w.written_through = seq;
        core.counters.units_written.add(1);
        core.counters.journal_bytes_written.add(len);
        Ok(at)
    }

    /// Closes the active segment (synced first) and makes the next one active for unit
    /// `seq`: the spare renamed in when `wants_prepared` (prepared here if none is ready),
    /// else a created, empty one.
    fn roll(&self, core: &Core, w: &mut Writer, seq: u64, wants_prepared: bool) -> Result<()> {
        let index = if w.file.is_some() {
            // Order matters: the outgoing segment is durable before the next exists, so
            // only the last segment can ever end torn (recovery refuses any other).
            if w.synced_through < w.written_through {
                w.sync(core)?;
            }
            w.segment + 1
        } else {
            w.segment
        };
        let path = core.segment_path(index);
        let f = if wants_prepared {
            // Waits for a spare the applier is preparing; prepares one here if none.
            let mut ready = self.spare_ready.lock().expect("spare lock");
            if !*ready {
                prepare_spare(core)?;
            }
            let spare = core.dir.join(SPARE_SEGMENT_FILE);
            // Crash: the spare's zeros are durable before this rename; a cut leaves
            // the spare (deleted on open) or the new segment full of zeros (an empty
            // segment to recovery: its zero tail is kept).
            core.fs
                .rename(&spare, &path)
                .map_err(core.failing_io("rename spare", &path))?;
            *ready = false;
            drop(ready);
            // The applier prepares the next spare.
            core.changed.notify_all();
            core.fs
                .open_file(&path, OpenMode::Existing)
                .map_err(core.failing_io("open segment", &path))?
        } else {
            // Crash: a cut before the directory sync below may lose the new name; no
            // unit in it was acknowledged yet, and the outgoing segment is synced.
            core.fs
                .open_file(&path, OpenMode::CreateTruncate)
                .map_err(core.failing_io("create segment", &path))?
        };
        // The new name is durable before any unit in it can be acknowledged.
        core.fs
            .sync_dir(&core.dir)
            .map_err(core.failing_io("fsync directory", &core.dir))?;
        core.counters.dir_sync_calls.add(1);
        core.lock_state().segments.rolled(index, seq);
        w.file = Some(f);
        w.segment = index;
        w.offset = 0;
        w.prepared_end = if wants_prepared {
            core.options.segment_bytes
        } else {
            0
        };
        Ok(())
    }

    /// Prepares the spare if there is none (the background applier, between its steps).
    pub(super) fn keep_spare_ready(&self, core: &Core) -> Result<()> {
        if !core.options.prepare_segments {
            return Ok(());
        }
        // A roll holding the lock is preparing or taking the spare itself.
        let Ok(mut ready) = self.spare_ready.try_lock() else {
            return Ok(());
        };
        if !*ready {
            prepare_spare(core)?;
            *ready = true;
        }
        Ok(())
    }
}

/// Writes the spare segment ([`write_spare`]; the caller holds `spare_ready` and sets
/// it). A failure poisons the engine.
fn prepare_spare(core: &Core) -> Result<()> {
    core.poison.check(ENGINE_NAME)?;
    let path = core.dir.join(SPARE_SEGMENT_FILE);
    // Not synced after a failure elsewhere: the engine is done (the spare holds no
    // unit, but nothing is synced once a caller may have the error).
    let before_sync = || core.poison.check(ENGINE_NAME);
    match write_spare(&*core.fs, &path, core.options.segment_bytes, before_sync) {
        Ok(()) => {}
        Err(SpareError::Poisoned(e)) => return Err(e),
        Err(SpareError::Io(op, e)) => return Err(core.failing_io(op, &path)(e)),
    }
    core.counters.segments_prepared.add(1);
    Ok(())
}

/// Why a spare could not be written: an I/O error (with the operation), or the engine was
/// poisoned by another call before the spare's sync.
pub(super) enum SpareError {
    Io(&'static str, std::io::Error),
    Poisoned(Error),
}

/// Writes `path` as a spare segment: `segment_bytes` of zeros, [`ZERO_CHUNK_BYTES`] per
/// write, then one `sync_data` unless `before_sync` refuses (the engine was poisoned
/// meanwhile), so that an append and its `sync_data` later write data only (ADR 0008,
/// "Prepared segments"). The open of a new journal calls it directly; the running engine
/// through [`prepare_spare`].
pub(super) fn write_spare(
    fs: &dyn FileSystem,
    path: &Path,
    segment_bytes: u64,
    before_sync: impl Fn() -> Result<()>,
) -> std::result::Result<(), SpareError> {
    let f = fs
        .open_file(path, OpenMode::CreateTruncate)
        .map_err(|e| SpareError::Io("create spare segment", e))?;
    let zeros = vec![0u8; ZERO_CHUNK_BYTES.min(segment_bytes) as usize];
    let mut at = 0;
    while at < segment_bytes {
        let n = (segment_bytes - at).min(zeros.len() as u64);
        f.write_at(at, &zeros[..n as usize])
            .map_err(|e| SpareError::Io("prepare spare segment", e))?;
        at += n;
    }
    before_sync().map_err(SpareError::Poisoned)?;
    f.sync_data()
        .map_err(|e| SpareError::Io("fsync spare segment", e))
}

/// Gives back the whole file-system blocks of a held segment that no kept value in it
/// touches: unit headers, other keyspaces' ops (applied to the index), the prepared
/// tail. `values` are every kept value the segment's units wrote (replaced or deleted
/// ones too), so no pointer can lead into a punched block. A failure poisons the
/// engine, as any failed write does.
// Crash: a segment below `first_segment` is never read as units again, and only its
// kept values are read; a cut leaves each punched range as it was or zeros, and either
// is never read.
pub(super) fn punch_dead_space(
    core: &Core,
    segment: u64,
    mut values: Vec<(u64, u64)>,
) -> Result<()> {
    values.sort_unstable();
    let path = core.segment_path(segment);
    let fail = |op| core.failing_io(op, &path);
    core.step.point();
    let file = core
        .fs
        .open_file(&path, OpenMode::Existing)
        .map_err(fail("open segment"))?;
    let file_len = file.len().map_err(fail("stat segment"))?;
    let punch = |from: u64, to: u64| -> Result<()> {
        let start = from.div_ceil(PUNCH_BLOCK_BYTES) * PUNCH_BLOCK_BYTES;
        let end = to / PUNCH_BLOCK_BYTES * PUNCH_BLOCK_BYTES;
        if end > start
            && file
                .punch_hole(start, end - start)
                .map_err(fail("punch segment"))?
        {
            core.counters.bytes_punched.add(end - start);
        }
        Ok(())
    };
    let mut at = 0;
    for (offset, len) in values {
        if offset > at {
            punch(at, offset)?;
        }
        at = at.max(offset + len);
    }
    if file_len > at {
        punch(at, file_len)?;
    }
    Ok(())
}

/// Unlinks the doomed segments no reader's snapshot can still point into.
// Crash: an unlink lost in a crash leaves a segment below `first_segment` with no
// pointer into it: the next open deletes it. No directory fsync is needed for that.
pub(super) fn unlink_doomed(core: &Core) -> Result<()> {
    let ready: Vec<u64> = core.lock_state().segments.take_unlinkable();
    for index in ready {
        let path = core.segment_path(index);
        core.step.point();
        match core.fs.remove_file(&path) {
            Ok(()) => core.counters.segments_deleted.add(1),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(core.fail(Error::io(ENGINE_NAME, "remove segment", &path, e)));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spare is exactly `segment_bytes` of zeros, synced, whether or not the size is a
    /// whole number of the writes' page-sized chunks; a poisoned engine's check stops it
    /// before the sync.
    #[test]
    fn a_spare_is_its_segment_size_of_synced_zeros() {
        let fs = crate::fs::SimFs::new();
        let path = Path::new("/j/spare.segment");
        fs.create_dir_all(Path::new("/j")).unwrap();
        for bytes in [1, 4096, 5000, 3 * 4096 + 1] {
            write_spare(&fs, path, bytes, || Ok(())).unwrap_or_else(|_| panic!("{bytes}"));
            let f = fs.open_file(path, OpenMode::Existing).unwrap();
            assert_eq!(f.len().unwrap(), bytes);
            let mut read = vec![1u8; bytes as usize];
            f.read_at(0, &mut read).unwrap();
            assert!(read.iter().all(|b| *b == 0), "{bytes}");
            assert_eq!(
                fs.stats().log.last(),
                Some(&(crate::fs::SimOp::SyncData, path.to_path_buf()))
            );
        }
        let refused = write_spare(&fs, path, 4096, || {
            Err(Error::storage(ENGINE_NAME, "test", "poisoned"))
        });
        assert!(matches!(refused, Err(SpareError::Poisoned(_))));
        assert_ne!(
            fs.stats().log.last(),
            Some(&(crate::fs::SimOp::SyncData, path.to_path_buf())),
            "no sync after the refusal"
        );
    }
}
