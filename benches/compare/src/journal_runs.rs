//! The journal contenders (`fpj-deferred`, `fpj-per-block`): the node's own write runs
//! (`flushpoint_runs::run_write`'s loop, unchanged) on three keyspaces of one
//! [`JournalEngine`] instead of three redb files — ADR 0008's engine through the `Db` seam.
//! Also `fpj-unit` (the shape's blocks as one unit each) and `fpj-save-block`
//! (`BlockStore::save_block` alone on a journal home's block store).
//! The node finds its three databases in one unit group (ADR 0011), so a flush point and a
//! consensus block are each one unit and one `fdatasync`.
//!
//! Invariant: the run checks its outcome as the redb rows do — the durable heights read back
//! after a reopen equal the blocks applied, and the journal's `sync_data` calls are the
//! unit path's: one per consensus block, one per flush point.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::demo::{Block, ChainSpec, Commit, KvApp};
use flushpoint::fs::StdFs;
use flushpoint::journal::{
    JournalEngine, JournalOptions, KeyspaceOptions, SEPARATE_VALUES_FROM_BYTES,
};
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::{Db, FlushPolicy, HoldingDb, MemoryDb, Mode, NoEvents, Node, PartSet};

use crate::check::{Outcome, check};
use crate::flushpoint_runs::{CHAIN_SEED, FpMode, FpRunOut};

/// The keyspaces, in the node's order (block store, state, app).
const KEYSPACES: [&str; 3] = ["block store", "state", "app"];

fn fp_err(what: &str) -> impl Fn(flushpoint::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// True when the environment plants a wrong height expectation (`COMPARE_SABOTAGE=heights`,
/// the harness's switch for seeing a check reject a wrong answer).
fn sabotage_heights() -> bool {
    std::env::var("COMPARE_SABOTAGE").is_ok_and(|v| v == "heights")
}

/// `FPJ_PREPARE=0` turns prepared segments off (`JournalOptions::prepare_segments`), to
/// measure what they change; `FPJ_SEPARATE=0` keeps block parts in the index;
/// `FPJ_APP_RUNS=0` keeps the app's state in the index's tree instead of sorted runs, and
/// `FPJ_APP_SEPARATE=0` keeps the app's large values in its runs (ADR 0016);
/// `FPJ_APPLY_DELAY_MS` sets `JournalOptions::apply_batch_delay`; `FPJ_INDEX_CACHE_MIB`,
/// `FPJ_CHECKPOINT_MIB` and `FPJ_OVERLAY_MIB` set `index_cache_bytes`, `checkpoint_bytes` and
/// `overlay_bytes_max`, and `FPJ_PREPARED_BELOW_KIB` `prepared_units_below_bytes`, to measure
/// what each changes.
fn open(dir: &Path) -> Result<JournalEngine, String> {
    let defaults = JournalOptions::default();
    let engine = JournalEngine::open(
        Arc::new(StdFs),
        &dir.join("journal"),
        defaults
            .clone()
            .with_prepare_segments(std::env::var("FPJ_PREPARE").map_or(true, |v| v != "0"))
            .with_apply_batch_delay(
                std::env::var("FPJ_APPLY_DELAY_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .map_or(
                        flushpoint::journal::APPLY_BATCH_DELAY,
                        Duration::from_millis,
                    ),
            )
            .with_index_cache_bytes(
                mib_from_env("FPJ_INDEX_CACHE_MIB").unwrap_or(defaults.index_cache_bytes as u64)
                    as usize,
            )
            .with_checkpoint_bytes(
                mib_from_env("FPJ_CHECKPOINT_MIB").unwrap_or(defaults.checkpoint_bytes),
            )
            .with_overlay_bytes_max(
                mib_from_env("FPJ_OVERLAY_MIB").unwrap_or(defaults.overlay_bytes_max),
            )
            .with_prepared_units_below_bytes(
                std::env::var("FPJ_PREPARED_BELOW_KIB")
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                    .map_or(defaults.prepared_units_below_bytes, |kib| kib * 1024),
            ),
    )
    .map_err(fp_err("open journal"))?;
    // As a journal home does (ADR 0013): the block store's parts are written once, to the
    // journal. `FPJ_SEPARATE=0` keeps them in the index, to measure what that changes.
    if std::env::var("FPJ_SEPARATE").map_or(true, |v| v != "0") {
        engine
            .keyspace_with(
                KEYSPACES[0],
                KeyspaceOptions::separating_values_from(SEPARATE_VALUES_FROM_BYTES),
            )
            .map_err(fp_err("block store keyspace"))?;
    }
    // As a new journal home does (ADR 0014, 0016): the app's state in sorted runs, its large
    // values written once, to the journal. `FPJ_APP_RUNS=0` keeps it in the index's tree and
    // `FPJ_APP_SEPARATE=0` its values in its runs, to measure what each changes.
    if std::env::var("FPJ_APP_RUNS").map_or(true, |v| v != "0") {
        let runs = KeyspaceOptions::indexed_by_runs();
        let options = if std::env::var("FPJ_APP_SEPARATE").map_or(true, |v| v != "0") {
            runs.with_values_separated_from(SEPARATE_VALUES_FROM_BYTES)
        } else {
            runs
        };
        engine
            .keyspace_with(KEYSPACES[2], options)
            .map_err(fp_err("app keyspace"))?;
    }
    Ok(engine)
}

/// Every sync the engine made: the segments' `sync_data`, the directory fsyncs of new
/// segments and the index's own syncs (checkpoints, file growth).
fn all_syncs(engine: &JournalEngine) -> u64 {
    let c = engine.counts();
    c.journal_sync_data_calls + c.dir_sync_calls + c.index.sync_data_calls
}

/// A size in MiB from the environment variable `name`, in bytes.
fn mib_from_env(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|mib| mib * 1024 * 1024)
}

fn durable_heights(engine: &JournalEngine) -> Result<[u64; 3], String> {
    let ks = |n: &str| -> Result<Arc<dyn Db>, String> {
        Ok(engine.keyspace(n).map_err(fp_err("keyspace"))? as Arc<dyn Db>)
    };
    let bs = BlockStore::<flushpoint::demo::Block>::open(ks(KEYSPACES[0])?)
        .map_err(fp_err("block store"))?;
    let st = StateStore::<flushpoint::demo::DemoChain>::open(ks(KEYSPACES[1])?);
    let app = KvApp::open(Arc::new(HoldingDb::new(ks(KEYSPACES[2])?))).map_err(fp_err("app"))?;
    let (_, o) = flushpoint::node::observe(&bs, &st, &app).map_err(fp_err("observe"))?;
    Ok([o.block_store_height, o.state_height, o.app_height])
}

/// Runs `mode` (deferred or per-block) on the journal, as `flushpoint_runs::run_write` runs
/// it on redb. `syncs` counts every sync the engine made: the segments' `sync_data`, the
/// directory fsyncs of new segments and the index's own syncs (checkpoints, file growth).
pub fn run_write(
    mode: FpMode,
    profile_name: &str,
    dir: &Path,
    stop: &dyn Fn(u64, Duration) -> bool,
    on_start: &mut dyn FnMut(),
    on_end: &mut dyn FnMut(),
) -> Result<FpRunOut, String> {
    let spec = ChainSpec::new(CHAIN_SEED, profile_name.parse()?);
    let engine = open(dir)?;
    // The keyspaces themselves, not wrapped: a counting wrapper would (rightly) hide the
    // unit group, and the node would write each database apart. The engine counts the syncs.
    let ks = |n: &str| -> Result<Arc<dyn Db>, String> {
        Ok(engine.keyspace(n).map_err(fp_err("keyspace"))? as Arc<dyn Db>)
    };
    let [tb, ts, ta] = [ks(KEYSPACES[0])?, ks(KEYSPACES[1])?, ks(KEYSPACES[2])?];
    let app = KvApp::open(Arc::new(HoldingDb::new(ta))).map_err(fp_err("open app"))?;
    let (mut node, _) = Node::open(tb, ts, Box::new(app), spec.chain(), Box::new(NoEvents))
        .map_err(fp_err("open node"))?;
    let synced_of = |e: &JournalEngine| e.counts().journal_sync_data_calls;
    let synced0 = synced_of(&engine);
    let syncs0 = all_syncs(&engine);
    on_start();
    let start = Instant::now();
    match mode {
        FpMode::Deferred => node
            .start_block_sync(FlushPolicy::default(), start)
            .map_err(fp_err("start block sync"))?,
        FpMode::PerBlock => node
            .set_per_block_mode(Mode::Consensus)
            .map_err(fp_err("mode"))?,
        other => return Err(format!("{other:?} has no journal contender")),
    }
    let mut blocks = 0u64;
    while !stop(blocks, start.elapsed()) {
        let (b, parts, c) = spec.next_block(node.state());
        if node.mode() == Mode::BlockSync {
            let now = Instant::now();
            node.sync_block(&b, &parts, &c, now)
                .map_err(fp_err("sync block"))?;
            node.on_timer(now).map_err(fp_err("timer"))?;
        } else {
            node.commit_block(&b, &parts, &c)
                .map_err(fp_err("commit block"))?;
        }
        blocks += 1;
    }
    let loop_end = start.elapsed();
    let mut flush_points = node.deferred().flush_points;
    flush_points += u64::from(node.stop(Instant::now()).map_err(fp_err("stop"))?.is_some());
    let stopped = start.elapsed();
    let synced = synced_of(&engine) - synced0;
    // Close the engine before the clock stops, as the redb rows close their files: apply
    // what is left and checkpoint (counted), then drop the last handle (its close finds
    // nothing left to do).
    engine.checkpoint().map_err(fp_err("checkpoint"))?;
    let syncs = all_syncs(&engine) - syncs0;
    let counts = engine.counts();
    drop(engine);
    let elapsed = start.elapsed();
    on_end();
    eprintln!(
        "journal {mode:?}: loop {:.2} s, stop {:.2} s, checkpoint and close {:.2} s",
        loop_end.as_secs_f64(),
        (stopped - loop_end).as_secs_f64(),
        (elapsed - stopped).as_secs_f64()
    );
    eprintln!(
        "journal {mode:?}: {blocks} blocks, {syncs} syncs ({} journal sync_data, {} dir fsync, {} index sync_data), {} units, {} checkpoints, {} segments deleted",
        counts.journal_sync_data_calls,
        counts.dir_sync_calls,
        counts.index.sync_data_calls,
        counts.units_written,
        counts.checkpoints,
        counts.segments_deleted
    );

    let heights = durable_heights(&open(dir)?)?;
    check(
        "durable heights (block store, state, app)",
        &Outcome::Heights(heights.to_vec()),
        // COMPARE_SABOTAGE=heights plants a wrong expectation, as in the redb rows.
        &Outcome::Heights(vec![blocks + u64::from(sabotage_heights()); 3]),
    )
    .map_err(|e| e.to_string())?;
    if !unit_path(mode, synced, blocks, flush_points) {
        return Err(format!(
            "journal {mode:?}: {synced} journal syncs for {blocks} blocks and {flush_points} flush points is not the unit path"
        ));
    }
    Ok(FpRunOut {
        blocks,
        elapsed,
        durable: stopped,
        syncs,
        synced_batches: synced,
        flush_points,
    })
}

/// The journal's `sync_data` calls on the unit path (ADR 0011): one per consensus block;
/// one per flush point, plus at most one per segment roll (a roll syncs the outgoing
/// segment when it holds unsynced units: none on this path, allowed all the same).
fn unit_path(mode: FpMode, syncs: u64, blocks: u64, flush_points: u64) -> bool {
    match mode {
        FpMode::PerBlock => syncs == blocks,
        FpMode::Deferred => flush_points >= 1 && syncs >= flush_points && syncs <= 2 * flush_points,
        _ => false,
    }
}

/// `fpj-unit`: the shape's block — its block store, state and app ops, the bytes the
/// raw-sync row appends — committed as **one** synced unit per block with
/// [`JournalEngine::commit`]: what a consensus block costs once the node writes it as one
/// unit (issue 8's target: ≤ 1.5× raw-sync). Checked like the peers: the last block's
/// records read back after a reopen.
pub fn run_unit_per_block(
    shape: &crate::shape::Shape,
    pool: &[u8],
    dir: &Path,
    stop: &dyn Fn(u64, Duration) -> bool,
    on_start: &mut dyn FnMut(),
    on_end: &mut dyn FnMut(),
) -> Result<crate::peers::PeerOut, String> {
    use flushpoint::{Batch, Durability};
    let engine = open(dir)?;
    let syncs0 = all_syncs(&engine);
    on_start();
    let start = Instant::now();
    let mut blocks = 0u64;
    let mut commits = crate::peers::CommitTimes::default();
    while !stop(blocks, start.elapsed()) {
        let mut batches = [Batch::new(), Batch::new(), Batch::new()];
        for op in shape.peer_block(blocks + 1, pool) {
            let b = &mut batches[op.store.index()];
            match op.value {
                Some(v) => b.put(op.key, v.to_vec()),
                None => b.delete(op.key),
            };
        }
        let units: Vec<(&str, &Batch)> = KEYSPACES.iter().copied().zip(batches.iter()).collect();
        commits
            .time(|| engine.commit(&units, Durability::Synced))
            .map_err(fp_err("commit"))?;
        blocks += 1;
    }
    // Every unit was synced by its commit.
    let durable = start.elapsed();
    engine.checkpoint().map_err(fp_err("checkpoint"))?;
    let syncs = all_syncs(&engine) - syncs0;
    drop(engine);
    let elapsed = start.elapsed();
    on_end();
    let engine = open(dir)?;
    let ks: Vec<_> = KEYSPACES
        .iter()
        .map(|n| engine.keyspace(n).map_err(fp_err("keyspace")))
        .collect::<Result<_, _>>()?;
    crate::peers::verify(shape, pool, blocks, |store, key| {
        Ok(ks[store.index()]
            .get(key)
            .map_err(fp_err("get"))?
            .map(|v| v.to_vec()))
    })?;
    Ok(crate::peers::PeerOut {
        blocks,
        elapsed,
        durable,
        syncs,
        commits,
    })
}

/// Blocks the `fpj-save-block` row makes before its clock starts (light / heavy), for a
/// run of [`SAVE_RUN_SECS`]: its timed loop then runs `save_block` alone, and stops at the
/// run's time or when the made blocks run out. Why these: thousands of light commits and
/// hundreds of heavy ones for a median and a 99th percentile (a light save takes ~0.2 ms, a
/// heavy one ~2 ms), while the made blocks (~9 KB light, ~1.8 MB heavy; the memory node
/// that made them holds them again) stay under 2 GiB.
pub const SAVE_BLOCKS_LIGHT: u64 = 20_000;
/// See [`SAVE_BLOCKS_LIGHT`].
pub const SAVE_BLOCKS_HEAVY: u64 = 500;
/// The run length the made blocks are counted for, in seconds; a shorter run (the quick
/// mode's) makes proportionally fewer, at least [`SAVE_BLOCKS_MIN`].
pub const SAVE_RUN_SECS: f64 = 5.0;
/// The fewest blocks the row makes.
pub const SAVE_BLOCKS_MIN: u64 = 10;

/// How many blocks the `fpj-save-block` row makes: `blocks` when the run is bounded by a
/// block count (all of them, held in memory: the caller's choice), else for a `profile` run
/// of `secs` seconds, proportionally fewer than [`SAVE_BLOCKS_LIGHT`] /
/// [`SAVE_BLOCKS_HEAVY`] below [`SAVE_RUN_SECS`].
pub fn save_blocks_to_make(profile: &str, secs: Option<f64>, blocks: Option<u64>) -> u64 {
    if let Some(b) = blocks {
        return b;
    }
    let most = if profile == "heavy" {
        SAVE_BLOCKS_HEAVY
    } else {
        SAVE_BLOCKS_LIGHT
    };
    match secs {
        Some(s) if s < SAVE_RUN_SECS => {
            ((most as f64 * s / SAVE_RUN_SECS) as u64).max(SAVE_BLOCKS_MIN)
        }
        _ => most,
    }
}

/// The demo chain's blocks `1..=n` with their parts and seen commits, as a node over
/// memory makes and executes them (each block is made from the state the one before left).
fn make_blocks(spec: &ChainSpec, n: u64) -> Result<Vec<(Block, PartSet, Commit)>, String> {
    let memory = |name: &str| Arc::new(MemoryDb::new(name)) as Arc<dyn Db>;
    let app = KvApp::open(Arc::new(HoldingDb::new(memory("app")))).map_err(fp_err("open app"))?;
    let (mut node, _) = Node::open(
        memory("block store"),
        memory("state"),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .map_err(fp_err("open memory node"))?;
    node.start_block_sync(FlushPolicy::default(), Instant::now())
        .map_err(fp_err("start block sync"))?;
    let mut made = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for _ in 0..n {
        let (b, parts, c) = spec.next_block(node.state());
        let now = Instant::now();
        node.sync_block(&b, &parts, &c, now)
            .map_err(fp_err("sync block"))?;
        node.on_timer(now).map_err(fp_err("timer"))?;
        made.push((b, parts, c));
    }
    Ok(made)
}

/// `fpj-save-block`: `BlockStore::save_block` alone on a journal home's block store (its
/// parts separated, as a home's are), the demo chain's blocks made beforehand (at most
/// `most`: [`save_blocks_to_make`]); each save is
/// one unit and one `sync_data`, and is timed as a commit (each block read just before its
/// save, outside the clock: [`warm`]). Issue 8 asks it, like a whole
/// consensus block, to stay within 1.5× a raw append + `fdatasync` of the same bytes
/// (`raw-sync-blocks`: the shape's block-store records).
///
/// The outcome check: reopened, the block store is at the last height saved and loads that
/// block back with the hash it was saved with; the journal synced once per save.
pub fn run_save_block(
    profile_name: &str,
    dir: &Path,
    most: u64,
    stop: &dyn Fn(u64, Duration) -> bool,
    on_start: &mut dyn FnMut(),
    on_end: &mut dyn FnMut(),
) -> Result<crate::peers::PeerOut, String> {
    let spec = ChainSpec::new(CHAIN_SEED, profile_name.parse()?);
    // At most `most`, made before the clock starts: a `--blocks` bound applies here, a time
    // bound cannot yet.
    let n = (0..most).find(|&n| stop(n, Duration::ZERO)).unwrap_or(most);
    let made = make_blocks(&spec, n)?;
    let open_store = |engine: &JournalEngine| -> Result<BlockStore<Block>, String> {
        let db = engine
            .keyspace(KEYSPACES[0])
            .map_err(fp_err("block store keyspace"))?;
        BlockStore::open(db as Arc<dyn Db>).map_err(fp_err("open block store"))
    };
    let engine = open(dir)?;
    let store = open_store(&engine)?;
    let syncs0 = all_syncs(&engine);
    let journal_syncs0 = engine.counts().journal_sync_data_calls;
    on_start();
    let start = Instant::now();
    let mut blocks = 0u64;
    let mut commits = crate::peers::CommitTimes::default();
    for (b, parts, c) in &made {
        if stop(blocks, start.elapsed()) {
            break;
        }
        warm(b, parts);
        commits
            .time(|| store.save_block(b, parts, c))
            .map_err(fp_err("save block"))?;
        blocks += 1;
    }
    // Every save was synced by its own unit.
    let durable = start.elapsed();
    engine.checkpoint().map_err(fp_err("checkpoint"))?;
    let syncs = all_syncs(&engine) - syncs0;
    let journal_syncs = engine.counts().journal_sync_data_calls - journal_syncs0;
    drop(store);
    drop(engine);
    let elapsed = start.elapsed();
    on_end();

    let store = open_store(&open(dir)?)?;
    check(
        "block store height after save_block",
        &Outcome::Heights(vec![store.height()]),
        // COMPARE_SABOTAGE=heights plants a wrong expectation, as in the other rows.
        &Outcome::Heights(vec![blocks + u64::from(sabotage_heights())]),
    )
    .map_err(|e| e.to_string())?;
    if let Some((last, _, _)) = blocks.checked_sub(1).and_then(|i| made.get(i as usize)) {
        let h = last.height();
        let loaded = store
            .load_block(h)
            .map_err(fp_err("load block"))?
            .ok_or(format!("block {h} was saved and does not load"))?;
        if loaded.hash() != last.hash() {
            return Err(format!(
                "block {h} loads with another hash than it was saved with"
            ));
        }
    }
    if !one_sync_per_save(journal_syncs, blocks) {
        return Err(format!(
            "save_block: {journal_syncs} journal syncs for {blocks} saves is not one unit and one sync per save"
        ));
    }
    Ok(crate::peers::PeerOut {
        blocks,
        elapsed,
        durable,
        syncs,
        commits,
    })
}

/// Reads `block`'s bytes and its parts once, outside the commit's clock, as a node has
/// just before it saves a block (it received the parts, decoded and executed the block),
/// and as `raw-sync-blocks` builds its buffer just before its clock starts. Why: the row
/// makes hundreds of heavy blocks (about 1 GiB) before its clock starts, and without this
/// each save began by fetching a block evicted from every cache long before.
fn warm(block: &Block, parts: &PartSet) {
    let mut x = 0u8;
    for i in 0..parts.total() {
        if let Some(p) = parts.part(i) {
            x ^= p.iter().fold(0u8, |a, b| a ^ b);
        }
    }
    std::hint::black_box((x, block.encode()));
}

/// One journal `sync_data` per `save_block` (each is one `Synced` unit), plus at most one
/// per segment roll (a roll syncs the outgoing segment only when it holds unsynced units:
/// none on this path, allowed all the same).
fn one_sync_per_save(journal_syncs: u64, saves: u64) -> bool {
    saves >= 1 && journal_syncs >= saves && journal_syncs <= saves + saves.div_ceil(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_path_check_rejects_the_ordered_path_and_a_missing_sync() {
        assert!(unit_path(FpMode::PerBlock, 10, 10, 0));
        // The ordered path (4 syncs per consensus block) and a lost sync are refused.
        assert!(!unit_path(FpMode::PerBlock, 40, 10, 0));
        assert!(!unit_path(FpMode::PerBlock, 9, 10, 0));
        assert!(unit_path(FpMode::Deferred, 3, 1000, 3));
        // Three syncs per flush point (one per database) is the ordered path.
        assert!(!unit_path(FpMode::Deferred, 9, 1000, 3));
        assert!(!unit_path(FpMode::Deferred, 2, 1000, 3));
        assert!(!unit_path(FpMode::Deferred, 0, 1000, 0));
        assert!(!unit_path(FpMode::NoSync, 0, 1000, 0));
    }

    #[test]
    fn a_short_run_makes_proportionally_fewer_blocks_to_save() {
        assert_eq!(
            save_blocks_to_make("light", Some(5.0), None),
            SAVE_BLOCKS_LIGHT
        );
        assert_eq!(
            save_blocks_to_make("heavy", Some(8.0), None),
            SAVE_BLOCKS_HEAVY
        );
        assert_eq!(save_blocks_to_make("light", None, None), SAVE_BLOCKS_LIGHT);
        // A block count is made whole, above the time-bounded caps too.
        assert_eq!(
            save_blocks_to_make("light", Some(1.0), Some(50_000)),
            50_000
        );
        assert_eq!(save_blocks_to_make("heavy", None, Some(7)), 7);
        assert_eq!(
            save_blocks_to_make("light", Some(0.5), None),
            SAVE_BLOCKS_LIGHT / 10
        );
        assert_eq!(
            save_blocks_to_make("heavy", Some(0.01), None),
            SAVE_BLOCKS_MIN
        );
    }

    #[test]
    fn the_save_block_check_wants_one_sync_per_save() {
        assert!(one_sync_per_save(1000, 1000));
        assert!(one_sync_per_save(1003, 1000));
        // A save left unsynced, saves batched into one sync, or several syncs per save.
        assert!(!one_sync_per_save(999, 1000));
        assert!(!one_sync_per_save(1, 1000));
        assert!(!one_sync_per_save(4000, 1000));
        assert!(!one_sync_per_save(0, 0));
    }
}
