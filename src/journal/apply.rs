//! One apply step's index transaction ([`apply_units`]): the units' ops written to each
//! keyspace's index — a tree's table, a separating tree's tagged values and pointers, or a
//! runs keyspace's new run — with the live bytes per segment, `applied_seq` and the
//! segments' applied ends, in one `Durability::None` commit (ADR 0008, 0013, 0014, 0016).
//!
//! Invariant: one transaction per step: a cut leaves none of its units in the index or all
//! of them, with `applied_seq`; no state between two units is ever durable.
//! Invariant: the live bytes of a segment are the sum of the pointers into it: every
//! pointer written, replaced or deleted changes them in the same transaction.
//! Invariant: touches the engine's state only to read the keyspaces' kinds and take run
//! ids; the caller (the applier) hands the result over, under the state lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use redb::TableDefinition;

use super::applier::Pending;
use super::format::{
    LIVE, META, META_APPLIED_SEQ, RUN_LEVEL, RUN_VALUES, RUNS, SEGMENT_ENDS, VALUE_INLINE, ValueAt,
    segment_file_name, table_name,
};
use super::index::{IndexLayout, KeyspaceInIndex};
use super::manifest::{RunPointers, RunValue, write_run};
use super::overlay::{KeyOrdered, NewestPerKey};
use super::recovery;
use super::run::Run;
use super::state::{Core, ENGINE_NAME};
use super::unit::{Layout, UnitOp};
use crate::db::{GuardedDrop, append_pair_crc};
use crate::error::{CorruptReason, Error, Result};

/// What an apply step changed beyond the tables: the live bytes of each segment whose
/// count changed, the segments whose first unit it applied, and where each value it kept
/// in the journal lies (segment, offset, length).
#[derive(Debug)]
pub(super) struct Applied {
    pub(super) live_now: Vec<(u64, u64)>,
    pub(super) segments_started: Vec<u64>,
    pub(super) value_ranges: Vec<(u64, u64, u64)>,
    /// The runs the step wrote (keyspaces indexed by runs), by keyspace.
    pub(super) new_runs: Vec<(String, Arc<Run>)>,
}

/// One unit's section for one keyspace in key order and as the unit holds it, the unit, and
/// the layout at the section's start.
type Section<'a> = (KeyOrdered<'a>, &'a [UnitOp], &'a Pending, Layout);

/// What a step's keyspaces add up to beyond their tables: the change of the bytes the index
/// points at per segment, the values kept in the journal and where they lie.
#[derive(Default)]
struct Tally {
    /// Segment → change of the bytes the index points at in it.
    delta: BTreeMap<u64, i64>,
    kept: u64,
    value_ranges: Vec<(u64, u64, u64)>,
}

impl Tally {
    /// A put of `v` (at `value_at` in its section's `unit`) kept in the journal: its pointer.
    fn keep(&mut self, unit: &Pending, value_at: u64, v: &[u8]) -> ValueAt {
        let at = ValueAt {
            segment: unit.segment,
            offset: unit.offset + value_at,
            len: u32::try_from(v.len()).expect("invariant: a unit's values are under 4 GiB"),
            crc: crc32fast::hash(v),
        };
        self.value_ranges
            .push((at.segment, at.offset, u64::from(at.len)));
        self.kept += 1;
        at
    }
}

/// One redb transaction with `Durability::None` holding `units`, in seq order per key.
/// A keyspace's ops from every unit go in one key order, the newest op per key
/// ([`NewestPerKey`]), so the inserts sweep the index's leaves once per step; in a
/// separating keyspace unit by unit (each in key order), as its pointers follow each
/// unit's layout.
/// In a separating keyspace a value at or above its threshold is written as a pointer
/// to its bytes in the unit (ADR 0013), and the live bytes per segment follow every
/// pointer written, replaced or deleted. Returns the new live bytes of each segment
/// whose count changed (written in the same transaction).
pub(super) fn apply_units(
    core: &Core,
    units: &[Pending],
    before_commit: impl FnOnce() -> Result<()>,
) -> Result<Applied> {
    let (separated, runs_kinds) = {
        let st = core.lock_state();
        let kinds: BTreeSet<String> = st.manifest.keyspaces().into_iter().collect();
        (st.separated.clone(), kinds)
    };
    let mut new_runs = Vec::new();
    let txn = core.begin_index_write(redb::Durability::None)?;
    let mut tally = Tally::default();
    for (name, parts) in sections_by_keyspace(units) {
        if runs_kinds.contains(name) {
            if let Some(run) =
                apply_to_runs(core, &txn, name, &parts, separated.get(name), &mut tally)?
            {
                new_runs.push((name.to_string(), run));
            }
            continue;
        }
        apply_to_tree(core, &txn, name, parts, separated.get(name), &mut tally)?;
    }
    let Tally {
        delta,
        kept,
        value_ranges,
    } = tally;
    let live_now = write_live(core, &txn, delta)?;
    let last = units.last().expect("non-empty").seq;
    core.index_call("write meta", || {
        let mut meta = META
            .open_mut(&txn, core.layout)
            .map_err(core.failing("open meta"))?;
        meta.insert(&META_APPLIED_SEQ, last)
            .map_err(core.failing("write meta"))?;
        Ok(())
    })?;
    // Where the applied units end in each segment: what recovery checks the segment
    // files against (a segment cut short lost units the index applied).
    core.index_call("write segment ends", || {
        let mut ends = SEGMENT_ENDS
            .open_mut(&txn, core.layout)
            .map_err(core.failing("open segment ends"))?;
        for (segment, end) in
            recovery::last_ends(units.iter().map(|u| (u.segment, u.offset + u.len)))
        {
            ends.insert(&segment, end)
                .map_err(core.failing("write segment ends"))?;
        }
        Ok(())
    })?;
    before_commit()?;
    core.step.point();
    core.index_call("commit", || {
        txn.into_inner().commit().map_err(core.failing("commit"))
    })?;
    core.counters.values_kept_in_journal.add(kept);
    Ok(Applied {
        live_now,
        segments_started: units
            .iter()
            .filter(|u| u.offset == 0)
            .map(|u| u.segment)
            .collect(),
        value_ranges,
        new_runs,
    })
}

/// Per keyspace, its sections from every unit in seq order (keyspaces are independent
/// tables, so grouping keeps each key's order), each with where its unit lies and the
/// layout at the section's start.
fn sections_by_keyspace(units: &[Pending]) -> BTreeMap<&str, Vec<Section<'_>>> {
    let mut by_keyspace: BTreeMap<&str, Vec<Section<'_>>> = BTreeMap::new();
    for u in units {
        let mut layout = Layout::new();
        for (i, (name, ops)) in u.ops.sections.0.iter().enumerate() {
            layout.section(name);
            by_keyspace
                .entry(name)
                .or_default()
                .push((u.ops.section(i), ops, u, layout));
            for (k, v) in ops {
                layout.op(k.len(), v.as_ref().map(|v| v.len()));
            }
        }
    }
    by_keyspace
}

/// Writes a runs keyspace's part of the step: the step's newest op per key as one run
/// (ADR 0014), whose manifest row (and, separating, its pointer rows) go in `txn`, durable
/// with the checkpoint that syncs the run. `None` when the step has no op for it.
fn apply_to_runs(
    core: &Core,
    txn: &redb::WriteTransaction,
    name: &str,
    parts: &[Section<'_>],
    separate_from: Option<&u64>,
    tally: &mut Tally,
) -> Result<Option<Arc<Run>>> {
    if parts.iter().all(|(_, ops, ..)| ops.is_empty()) {
        return Ok(None);
    }
    let sections: Vec<_> = parts.iter().map(|(ordered, ..)| *ordered).collect();
    let keys_max = sections.iter().map(|s| s.len() as u64).sum();
    let (run, pointers) = match separate_from {
        None => {
            let ops = NewestPerKey::new(sections)
                .map(|(k, v)| Ok((k.clone(), v.clone().map(RunValue::Stored))));
            write_run(core, name, ops, keys_max, false)?
        }
        Some(&from) => {
            // ADR 0016: the run holds each value in the tree's stored form, a
            // large one as a pointer to its bytes in its unit.
            let values_at: Vec<Vec<Option<u64>>> = parts
                .iter()
                .map(|(_, ops, _, layout)| {
                    let mut layout = *layout;
                    ops.iter()
                        .map(|(k, v)| layout.op(k.len(), v.as_ref().map(|v| v.len())))
                        .collect()
                })
                .collect();
            let mut newest = NewestPerKey::new(sections);
            let ops = std::iter::from_fn(|| {
                let (section, in_unit, (k, v)) = newest.next_placed()?;
                let stored = v.as_ref().map(|v| {
                    if v.len() as u64 >= from {
                        let value_at =
                            values_at[section][in_unit].expect("invariant: a put has a value");
                        RunValue::Pointer(tally.keep(parts[section].2, value_at, v))
                    } else {
                        RunValue::Inline(v.clone())
                    }
                });
                Some(Ok((k.clone(), stored)))
            });
            write_run(core, name, ops, keys_max, true)?
        }
    };
    list_step_run(core, txn, name, &run, &pointers, &mut tally.delta)?;
    Ok(Some(run))
}

/// Lists a step's `run` in `txn`: its manifest row, and a separating keyspace's pointer
/// rows with the live bytes they add.
fn list_step_run(
    core: &Core,
    txn: &redb::WriteTransaction,
    name: &str,
    run: &Run,
    pointers: &RunPointers,
    delta: &mut BTreeMap<u64, i64>,
) -> Result<()> {
    core.index_call("write runs", || {
        RUNS.open_mut(txn, core.layout)
            .map_err(core.failing("open runs"))?
            .insert(&(name, run.id()), RUN_LEVEL)
            .map_err(core.failing("write runs"))?;
        Ok(())
    })?;
    // Crash: the run's pointer rows and the live bytes they add are in this
    // step's transaction with its manifest row: durable together or not at all.
    if !pointers.is_empty() {
        core.index_call("write run values", || {
            let mut rows = RUN_VALUES
                .open_mut(txn, core.layout)
                .map_err(core.failing("open run values"))?;
            for (&segment, &bytes) in pointers {
                rows.insert(&(name, run.id(), segment), bytes)
                    .map_err(core.failing("write run values"))?;
            }
            Ok(())
        })?;
        for (&segment, &bytes) in pointers {
            *delta.entry(segment).or_default() += i64::try_from(bytes).expect("live bytes fit i64");
        }
    }
    Ok(())
}

/// Writes a tree keyspace's part of the step into its table in `txn`: the newest op per
/// key, or (separating from `separate_from` bytes) each unit's ops as tagged values and
/// pointers.
fn apply_to_tree(
    core: &Core,
    txn: &redb::WriteTransaction,
    name: &str,
    parts: Vec<Section<'_>>,
    separate_from: Option<&u64>,
    tally: &mut Tally,
) -> Result<()> {
    let table_name = table_name(name);
    let def: TableDefinition<&[u8], &[u8]> = TableDefinition::new(&table_name);
    let table = core.index_call("open table", || {
        txn.open_table(def).map_err(core.failing("open table"))
    })?;
    // Its drop hands the table's root back to the transaction, in redb.
    let mut table = GuardedDrop::new(core.index_guard.clone(), "close table", table);
    let Some(&from) = separate_from else {
        // One sweep in key order over every unit of the step, the newest op per key:
        // the same end state as the units one after another, each leaf visited once.
        // Crash: a cut before this step's commit leaves none of its units in the
        // index and after it all of them (one transaction, with `applied_seq`), so
        // no state between two units is ever durable; recovery replays the rest.
        let sections = parts.iter().map(|(ordered, ..)| *ordered).collect();
        for (k, v) in NewestPerKey::new(sections) {
            match v {
                Some(v) => core.index_call("insert", || {
                    core.layout
                        .put(&mut table, &k[..], &v[..])
                        .map_err(core.failing("insert"))
                })?,
                None => core.index_call("remove", || {
                    table.remove(&k[..]).map_err(core.failing("remove"))?;
                    Ok(())
                })?,
            }
        }
        return Ok(());
    };
    let mut stored = Vec::new();
    // A replaced or deleted value's pointer, its pair checked (checked layout) first.
    let old_pointer = |key: &[u8], old: &[u8]| -> Result<Option<ValueAt>> {
        let old = core.layout.value_of(name, key, old)?;
        ValueAt::decode(old).map_err(|reason| Error::Corrupt {
            db: KeyspaceInIndex(name).to_string(),
            key: key.to_vec(),
            height: None,
            reason,
        })
    };
    for (ordered, ops, unit, mut layout) in parts {
        // Where each value lies, in the unit's order (the order its layout follows).
        let values_at: Vec<Option<u64>> = ops
            .iter()
            .map(|(k, v)| layout.op(k.len(), v.as_ref().map(|v| v.len())))
            .collect();
        for (at_index, (k, v)) in ordered.iter() {
            let value_at = values_at[at_index];
            let old = match v {
                Some(v) => {
                    stored.clear();
                    if v.len() as u64 >= from {
                        let at =
                            tally.keep(unit, value_at.expect("invariant: a put has a value"), v);
                        stored.extend_from_slice(&at.encoded());
                        *tally.delta.entry(at.segment).or_default() += i64::from(at.len);
                    } else {
                        stored.push(VALUE_INLINE);
                        stored.extend_from_slice(v);
                    }
                    if core.layout == IndexLayout::Checked {
                        append_pair_crc(k, &mut stored);
                    }
                    core.index_call("insert", || {
                        Ok(table
                            .insert(&k[..], &stored[..])
                            .map_err(core.failing("insert"))?
                            .map(|old| old_pointer(k, old.value())))
                    })?
                }
                None => core.index_call("remove", || {
                    Ok(table
                        .remove(&k[..])
                        .map_err(core.failing("remove"))?
                        .map(|old| old_pointer(k, old.value())))
                })?,
            };
            // The value replaced or deleted no longer holds its segment.
            if let Some(old) = old {
                let old_at = old.map_err(|e| core.fail(e))?;
                if let Some(old_at) = old_at {
                    *tally.delta.entry(old_at.segment).or_default() -= i64::from(old_at.len);
                }
            }
        }
    }
    Ok(())
}

/// Applies `delta` (segment → change of the bytes pointers lead to in it) to [`LIVE`] in
/// `txn`; returns the new live bytes of each segment that changed (0: no row left).
pub(super) fn write_live(
    core: &Core,
    txn: &redb::WriteTransaction,
    delta: BTreeMap<u64, i64>,
) -> Result<Vec<(u64, u64)>> {
    let mut live_now = Vec::new();
    if delta.is_empty() {
        return Ok(live_now);
    }
    core.index_call("write live", || {
        let mut live = LIVE
            .open_mut(txn, core.layout)
            .map_err(core.failing("open live"))?;
        for (segment, change) in delta {
            if change == 0 {
                continue;
            }
            let was = live
                .get(&segment, "read live")
                .map_err(|e| core.failed(e))?
                .unwrap_or(0);
            let now = i64::try_from(was).expect("live bytes fit i64") + change;
            // Invariant: a segment's live bytes are the sum of the pointers into it.
            let now = u64::try_from(now).map_err(|_| {
                core.fail(Error::Corrupt {
                    db: format!("{ENGINE_NAME} index"),
                    key: segment_file_name(segment).into_bytes(),
                    height: None,
                    reason: CorruptReason::Invalid("live bytes below zero"),
                })
            })?;
            if now == 0 {
                live.remove(&segment).map_err(core.failing("write live"))?;
            } else {
                live.insert(&segment, now)
                    .map_err(core.failing("write live"))?;
            }
            live_now.push((segment, now));
        }
        Ok(())
    })?;
    Ok(live_now)
}
