//! `flushpoint inspect`: what a home holds and what the handshake would make of it.
//!
//! Invariant: inspect never writes to the databases: it reads through `observe` and
//! `classify` (pure) and never opens a `Node`. (Opening redb after a crash may run redb's
//! own file-level recovery, and opening a journal home runs the journal's recovery and
//! checkpoint (ADR 0008); no record changes.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use flushpoint::store::BlockStore;
use flushpoint::{Db, Home};
use serde::Serialize;

use super::error::{CliResult, describe};
use super::flags::resolve_home;
use super::handshake::{Classification, classification};
use super::heights::{Durable, HeightsJson, read_durable};
use super::out::{human_bytes, outln};

/// Flags of `flushpoint inspect`.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// Home directory [default: $FLUSHPOINT_HOME, else ./flushpoint-home]
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What `inspect` shows of a journal home's engine.
#[derive(Debug, Serialize)]
pub struct JournalInspect {
    /// Bytes of its segments and index on disk.
    pub disk_size_bytes: u64,
    /// The last unit applied to the index, after opening (recovery applies every unit).
    pub applied_seq: u64,
    /// The last unit the index's durable checkpoint covers.
    pub checkpoint_seq: u64,
    /// The engine's counts since this process opened it (its recovery's work).
    pub counts: flushpoint::journal::JournalCounts,
    /// What the journal's files and each keyspace occupy (`JournalEngine::usage`).
    pub usage: flushpoint::journal::JournalUsage,
    /// The block store's share of the disk: its index pages plus its share of the held
    /// segments, beside its logical bytes. Held segments keep the block store's parts and
    /// the app's large values (ADR 0013, 0016): the block store is charged the fraction of
    /// their bytes its values in the journal make up of all keyspaces' (an estimate: the
    /// engine counts held bytes per segment, not per keyspace). Segments at or past the
    /// checkpoint hold every keyspace's units and are not counted in it.
    pub block_store: Option<BlockStoreDisk>,
}

/// The block store's on-disk share in a journal home (see [`JournalInspect::block_store`]).
#[derive(Debug, Serialize)]
pub struct BlockStoreDisk {
    /// Its keys' and values' bytes as written.
    pub logical_bytes: u64,
    /// Its index pages plus its share of the held segments' allocated bytes.
    pub disk_bytes: u64,
    /// `disk_bytes / logical_bytes`.
    pub disk_per_logical: f64,
}

/// What `inspect` prints.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    /// The home.
    pub home: String,
    /// The home's storage engine: `redb` or `journal`.
    pub engine: &'static str,
    /// Raw heights on disk.
    pub heights: HeightsJson,
    /// The block store's base (lowest stored height).
    pub base: u64,
    /// The last flush record, `{from, to}`.
    pub flush_record: Option<flushpoint::records::FlushRecord>,
    /// The app hash on disk (hex).
    pub app_hash: String,
    /// On-disk size per database (redb: `block_store`, `state`, `app`; journal: `journal`,
    /// the three databases' shared segments and index).
    pub disk_size_bytes: BTreeMap<&'static str, u64>,
    /// The journal's figures, on a journal home.
    pub journal: Option<JournalInspect>,
    /// The target of a rollback a crash interrupted, if the home holds one.
    pub rollback_in_progress: Option<u64>,
    /// The handshake's classification.
    pub classification: Classification,
}

/// The part of `usage`'s held segment bytes that keyspace `k`'s values in the journal
/// make up of all keyspaces' (0 when no keyspace keeps values there).
fn held_share(
    usage: &flushpoint::journal::JournalUsage,
    k: &flushpoint::journal::KeyspaceUsage,
) -> u64 {
    let all: u128 = usage
        .keyspaces
        .values()
        .map(|u| u128::from(u.values_in_journal_bytes))
        .sum();
    if all == 0 {
        return 0;
    }
    let share = u128::from(usage.held_segment_bytes) * u128::from(k.values_in_journal_bytes) / all;
    // At most `held_segment_bytes`: this keyspace's bytes are part of `all`.
    u64::try_from(share).unwrap_or(usage.held_segment_bytes)
}

/// What `home`'s journal engine shows (a journal home only); its size is added to `disk`
/// as `journal`.
fn journal_inspect(
    home: &Home,
    disk: &mut BTreeMap<&'static str, u64>,
) -> flushpoint::Result<Option<JournalInspect>> {
    let Some(j) = home.journal() else {
        return Ok(None);
    };
    let (applied_seq, checkpoint_seq) = j.applied_and_checkpoint_seq();
    let disk_size_bytes = j.disk_size_bytes()?;
    disk.insert("journal", disk_size_bytes);
    let usage = j.usage()?;
    let block_store = usage
        .keyspaces
        .get(home.block_store_db.name())
        .filter(|k| k.logical_bytes > 0)
        .map(|k| {
            let disk_bytes = k.index_bytes + held_share(&usage, k);
            BlockStoreDisk {
                logical_bytes: k.logical_bytes,
                disk_bytes,
                disk_per_logical: disk_bytes as f64 / k.logical_bytes as f64,
            }
        });
    Ok(Some(JournalInspect {
        disk_size_bytes,
        applied_seq,
        checkpoint_seq,
        counts: j.counts(),
        usage,
        block_store,
    }))
}

/// Reads what the home at `home_path` holds, on a read-only open.
fn read_report(home_path: &Path) -> flushpoint::Result<InspectReport> {
    // Read-only, and not `Home::open`: an interrupted rollback is shown as it is.
    let home = Home::open_for_rollback_on(
        Home::read_only_fs(),
        home_path,
        flushpoint::HomeOptions::default(),
    )?;
    let rollback_in_progress = flushpoint::home::pending_rollback(&home)?;
    let Durable {
        heights,
        observed,
        state,
        app_hash,
    } = read_durable(&home)?;
    let base = BlockStore::<flushpoint::demo::Block>::open(
        home.block_store_db.clone() as std::sync::Arc<dyn Db>
    )?
    .base();
    let mut disk = BTreeMap::new();
    if let Some([b, s, a]) = home.redb_dbs() {
        disk.insert("block_store", b.disk_size_bytes()?);
        disk.insert("state", s.disk_size_bytes()?);
        disk.insert("app", a.disk_size_bytes()?);
    }
    let journal = journal_inspect(&home, &mut disk)?;
    Ok(InspectReport {
        home: home_path.display().to_string(),
        engine: home.engine().name(),
        heights,
        base,
        flush_record: observed.record,
        app_hash,
        disk_size_bytes: disk,
        journal,
        rollback_in_progress,
        classification: match rollback_in_progress {
            Some(t) => Classification {
                verdict: "rollback-in-progress",
                case: None,
                detail: format!(
                    "a rollback to {t} was interrupted: `flushpoint rollback --to {t}` finishes it, and an open finishes it or refuses the home"
                ),
            },
            None => classification(&observed, state.is_some()),
        },
    })
}

/// Prints the journal's lines of `inspect`'s human output.
fn print_journal(j: &JournalInspect) {
    outln!(
        "on disk: journal {} (segments, index and runs, shared by the three databases); units applied through {}, checkpoint at {}; since opening: {} checkpoint(s), {} sync_data",
        human_bytes(j.disk_size_bytes),
        j.applied_seq,
        j.checkpoint_seq,
        j.counts.checkpoints,
        j.counts.journal_sync_data_calls + j.counts.index.sync_data_calls
    );
    let u = &j.usage;
    outln!(
        "  index {}, segments held for values (block parts, large app values) {}, other segments {}, runs {}",
        human_bytes(u.index_file_bytes),
        human_bytes(u.held_segment_bytes),
        human_bytes(u.other_segment_bytes),
        human_bytes(u.run_file_bytes)
    );
    for (name, k) in &u.keyspaces {
        outln!(
            "  {name}: {} entries, {} logical, index pages {}, {} values ({}) in the journal",
            k.entries,
            human_bytes(k.logical_bytes),
            human_bytes(k.index_bytes),
            k.values_in_journal,
            human_bytes(k.values_in_journal_bytes)
        );
    }
    if let Some(b) = &j.block_store {
        outln!(
            "  block store on disk: {} for {} logical ({:.2}×: index pages and its share of the held segments)",
            human_bytes(b.disk_bytes),
            human_bytes(b.logical_bytes),
            b.disk_per_logical
        );
    }
}

/// Prints `report` for a person.
fn print_human(report: &InspectReport) {
    let heights = &report.heights;
    outln!("home {} ({} engine)", report.home, report.engine);
    outln!(
        "heights: block store {} (base {}), state {}, app {}",
        heights.block_store,
        report.base,
        heights.state,
        heights.app
    );
    outln!(
        "last flush record: {}",
        report.flush_record.map_or("none".to_string(), |r| format!(
            "{r} (blocks {}..={} written by one flush point)",
            r.from + 1,
            r.to
        ))
    );
    outln!("app hash: {}", report.app_hash);
    match &report.journal {
        None => outln!(
            "on disk: block store {}, state {}, app {}",
            human_bytes(report.disk_size_bytes["block_store"]),
            human_bytes(report.disk_size_bytes["state"]),
            human_bytes(report.disk_size_bytes["app"])
        ),
        Some(j) => print_journal(j),
    }
    let c = &report.classification;
    outln!(
        "classification: {}{} — {}",
        c.verdict,
        c.case.map_or(String::new(), |k| format!(" ({k})")),
        c.detail
    );
}

/// Runs `flushpoint inspect`.
pub fn run(a: &InspectArgs) -> CliResult<()> {
    let home_path = resolve_home(a.home.as_deref());
    let report = read_report(&home_path).map_err(|e| describe(&e, &home_path))?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string(&report).unwrap_or_else(|_| "{}".into())
        );
        return Ok(());
    }
    print_human(&report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flushpoint::journal::{JournalUsage, KeyspaceUsage};

    fn usage(held: u64, values: &[(&str, u64)]) -> JournalUsage {
        JournalUsage {
            held_segment_bytes: held,
            keyspaces: values
                .iter()
                .map(|(name, bytes)| {
                    let k = KeyspaceUsage {
                        values_in_journal_bytes: *bytes,
                        ..KeyspaceUsage::default()
                    };
                    (name.to_string(), k)
                })
                .collect(),
            ..JournalUsage::default()
        }
    }

    #[test]
    fn the_block_store_is_charged_its_share_of_the_held_segments_only() {
        // The app's large values share the held segments: half the values, half the bytes.
        let u = usage(1000, &[("app", 300), ("block store", 300), ("state", 0)]);
        assert_eq!(held_share(&u, &u.keyspaces["block store"]), 500);
        assert_eq!(held_share(&u, &u.keyspaces["app"]), 500);
        assert_eq!(held_share(&u, &u.keyspaces["state"]), 0);
        // Alone in the journal, it is charged all of them.
        let u = usage(1000, &[("app", 0), ("block store", 7)]);
        assert_eq!(held_share(&u, &u.keyspaces["block store"]), 1000);
        // No values in the journal: nothing held is anyone's.
        let u = usage(1000, &[("app", 0), ("block store", 0)]);
        assert_eq!(held_share(&u, &u.keyspaces["block store"]), 0);
        // No overflow at the extremes.
        let u = usage(u64::MAX, &[("app", u64::MAX), ("block store", u64::MAX)]);
        assert_eq!(held_share(&u, &u.keyspaces["block store"]), u64::MAX / 2);
    }
}
