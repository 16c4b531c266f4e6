//! What the journal occupies: its files' allocated bytes ([`disk_size_bytes`]) and, per
//! keyspace, its applied entries' logical bytes beside their index bytes ([`usage`]).
//!
//! Invariant: reads only (one index read transaction, the file system's sizes); for
//! inspection and measurement, not a running node's hot path.

use std::collections::BTreeMap;
use std::path::PathBuf;

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle};

use super::format::{INDEX_FILE, KEYSPACE_TABLE_PREFIX, SPARE_SEGMENT_FILE, ValueAt, table_name};
use super::manifest::RunList;
use super::options::{JournalUsage, KeyspaceUsage};
use super::run::MergedRuns;
use super::state::{Core, ENGINE_NAME};
use crate::db::{Direction, GuardedDrop, KeyRange};
use crate::error::{Error, Result};

/// Bytes the journal directory's files occupy (segments, index and runs).
pub(super) fn disk_size_bytes(core: &Core) -> Result<u64> {
    let (segments, runs): (Vec<u64>, Vec<PathBuf>) = {
        let st = core.lock_state();
        (st.segments.all_files(), st.manifest.paths(&core.dir, None))
    };
    core.allocated_bytes(
        segments
            .into_iter()
            .map(|i| core.segment_path(i))
            .chain(runs)
            .chain([core.dir.join(INDEX_FILE), core.dir.join(SPARE_SEGMENT_FILE)]),
    )
}

/// What the journal occupies on disk, and each keyspace's applied entries (see
/// [`JournalEngine::usage`](super::JournalEngine::usage)).
pub(super) fn usage(core: &Core) -> Result<JournalUsage> {
    core.poison.check(ENGINE_NAME)?;
    let (txn, separated, held, others, runs) = {
        let st = core.lock_state();
        let runs: Vec<(String, RunList, Vec<PathBuf>)> = st
            .manifest
            .lists()
            .into_iter()
            .map(|(name, list)| {
                let paths = st.manifest.paths(&core.dir, Some(&name));
                (name, list, paths)
            })
            .collect();
        // Under the state lock: the guard catches a panic before it could unwind
        // through (and poison) the lock.
        let txn = core.index_call("begin read", || {
            core.index
                .begin_read()
                .map_err(|e| Error::storage(ENGINE_NAME, "begin read", e))
        })?;
        let txn = GuardedDrop::new(core.index_guard.clone(), "end read", txn);
        let held = st.segments.held_files();
        let others = st.segments.other_files();
        (txn, st.separated.clone(), held, others, runs)
    };
    let mut usage = JournalUsage {
        run_file_bytes: 0,
        index_file_bytes: core.allocated_bytes([core.dir.join(INDEX_FILE)])?,
        held_segment_bytes: core.allocated_bytes(held.into_iter().map(|i| core.segment_path(i)))?,
        other_segment_bytes: core.allocated_bytes(
            others
                .into_iter()
                .map(|i| core.segment_path(i))
                .chain([core.dir.join(SPARE_SEGMENT_FILE)]),
        )?,
        keyspaces: BTreeMap::new(),
    };
    let names: Vec<String> = core.index_call("list tables", || {
        Ok(txn
            .list_tables()
            .map_err(|e| Error::storage(ENGINE_NAME, "list tables", e))?
            .filter_map(|t| {
                t.name()
                    .strip_prefix(KEYSPACE_TABLE_PREFIX)
                    .map(str::to_string)
            })
            .collect())
    })?;
    core.index_call("read", || {
        for name in names {
            let table_name = table_name(&name);
            let table = txn
                .open_table(TableDefinition::<&[u8], &[u8]>::new(&table_name))
                .map_err(|e| Error::storage(ENGINE_NAME, "open table", e))?;
            let stats = table
                .stats()
                .map_err(|e| Error::storage(ENGINE_NAME, "table stats", e))?;
            let mut k = KeyspaceUsage {
                index_bytes: stats.stored_bytes()
                    + stats.metadata_bytes()
                    + stats.fragmented_bytes(),
                ..KeyspaceUsage::default()
            };
            let separating = separated.contains_key(&name);
            for item in table
                .iter()
                .map_err(|e| Error::storage(ENGINE_NAME, "read", e))?
            {
                let (key, value) = item.map_err(|e| Error::storage(ENGINE_NAME, "read", e))?;
                let stored = core.layout.value_of(&name, key.value(), value.value())?;
                count(&mut k, &name, separating, key.value(), stored)?;
            }
            usage.keyspaces.insert(name, k);
        }
        Ok(())
    })?;
    // A keyspace indexed by runs: its entries as its runs merged give them, and its
    // run files' allocated bytes as its index bytes.
    for (name, list, paths) in runs {
        let mut k = KeyspaceUsage {
            index_bytes: core.allocated_bytes(paths)?,
            ..KeyspaceUsage::default()
        };
        usage.run_file_bytes += k.index_bytes;
        let separating = separated.contains_key(&name);
        for op in MergedRuns::over(&list, &KeyRange::all(), Direction::Forward, false) {
            let (key, value) = op?;
            let value = value.expect("invariant: tombstones are left out");
            count(&mut k, &name, separating, &key, &value)?;
        }
        usage.keyspaces.insert(name, k);
    }
    Ok(usage)
}

/// Counts one entry of keyspace `name` into `k` as the index stores it (a separating
/// keyspace's value tagged, inline or a pointer).
fn count(
    k: &mut KeyspaceUsage,
    name: &str,
    separating: bool,
    key: &[u8],
    stored: &[u8],
) -> Result<()> {
    k.entries += 1;
    k.logical_bytes += key.len() as u64;
    if !separating {
        k.logical_bytes += stored.len() as u64;
        return Ok(());
    }
    match ValueAt::decode(stored) {
        Ok(Some(at)) => {
            k.logical_bytes += u64::from(at.len);
            k.values_in_journal += 1;
            k.values_in_journal_bytes += u64::from(at.len);
        }
        Ok(None) => k.logical_bytes += stored.len() as u64 - 1,
        Err(reason) => {
            return Err(Error::Corrupt {
                db: name.to_string(),
                key: key.to_vec(),
                height: None,
                reason,
            });
        }
    }
    Ok(())
}
