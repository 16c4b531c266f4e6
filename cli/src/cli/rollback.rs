//! `flushpoint rollback`: lowers the block store and the state to a height H, consistently.
//!
//! The demo app keeps no undo log (`App::rollback_to` refuses), so H may not be below the
//! app's height: the app would be ahead of the state, a shape the handshake refuses.
//!
//! Write order, and why (each line below is a crash point):
//! 1. an intent file `ROLLBACK-IN-PROGRESS` (target H) is written and fsynced, with its
//!    directory entry;
//! 2. the state store is rolled back to H in one synced batch (state at H, results and
//!    history above H removed). The state at H is rebuilt from the stored history and the
//!    headers of blocks H and H+1 *before* anything is written, and checked against block
//!    H+1's header (which commits to every field of it);
//! 3. the block store is rolled back to H (top down, synced batches, each lowering the
//!    stored height with its deletions);
//! 4. the intent file is removed.
//!
//! The state goes first because rebuilding it needs block H+1, which step 3 deletes: a
//! crash after 2 leaves every block still on disk, and rerunning the same command finishes
//! step 3. The other order would leave the state above the block store with block H+1 gone,
//! and no way to rebuild the state at H. A crash between steps leaves a home the handshake
//! refuses (block store more than one block ahead, no flush record), so no node starts on a
//! half-rolled-back home; the intent file lets `rollback` recognise and finish it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use flushpoint::{
    BlockStore, ChainSpec, Db, HandshakeCase, HoldingDb, Home, KvApp, NoEvents, Node, State,
    StateStore, classify, fsync_dir,
};

use super::{CliError, CliResult, describe};

/// Name of the intent file a rollback keeps while it runs.
const INTENT_FILE: &str = "ROLLBACK-IN-PROGRESS";

/// Flags of `flushpoint rollback`.
#[derive(Debug, Clone, Args)]
pub struct RollbackArgs {
    /// Home directory [default: $FLUSHPOINT_HOME, else ./flushpoint-home]
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// The height to roll back to.
    #[arg(long)]
    pub to: u64,
    /// First run the handshake's repair (e.g. roll a crashed flush point forward).
    #[arg(long)]
    pub repair: bool,
}

fn read_intent(home: &Path) -> Option<u64> {
    std::fs::read_to_string(home.join(INTENT_FILE))
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn write_intent(home: &Path, to: u64) -> std::io::Result<()> {
    let tmp = home.join(format!("{INTENT_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{to}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, home.join(INTENT_FILE))?;
    fsync_dir(home)
}

fn remove_intent(home: &Path) -> std::io::Result<()> {
    std::fs::remove_file(home.join(INTENT_FILE))?;
    fsync_dir(home)
}

/// Rebuilds the state at `h` (< the current state's height) from stored history and
/// checks it against block h+1's header.
fn rebuild_state(bs: &BlockStore, st: &StateStore, cur: &State, h: u64) -> Result<State, String> {
    let e = |x: flushpoint::Error| x.to_string();
    let next = bs
        .load_block_meta(h + 1)
        .map_err(e)?
        .ok_or(format!("block {} is not stored", h + 1))?;
    let (vals_changed, validators) = st
        .load_validators(h + 1)
        .map_err(e)?
        .ok_or(format!("validators for height {} are not stored", h + 1))?;
    let (params_changed, params) = st.load_consensus_params(h + 1).map_err(e)?.ok_or(format!(
        "consensus params for height {} are not stored",
        h + 1
    ))?;
    let state = if h + 1 == cur.initial_height {
        State::genesis(cur.initial_height, validators, params, next.header.app_hash)
    } else {
        let meta = bs
            .load_block_meta(h)
            .map_err(e)?
            .ok_or(format!("block {h} is not stored"))?;
        let (_, last_validators) = st
            .load_validators(h)
            .map_err(e)?
            .ok_or(format!("validators for height {h} are not stored"))?;
        let results = st
            .load_results(h)
            .map_err(e)?
            .ok_or(format!("results of block {h} are not stored"))?;
        State {
            initial_height: cur.initial_height,
            last_block_height: h,
            last_block_hash: meta.block_hash,
            last_block_time_ms: meta.header.time_ms,
            validators,
            last_validators,
            last_height_validators_changed: vals_changed,
            consensus_params: params,
            last_height_params_changed: params_changed,
            last_results_hash: results.hash(),
            app_hash: next.header.app_hash,
        }
    };
    // Block h+1's header commits to the state it was built on: check every field it covers.
    let hd = &next.header;
    if hd.last_block_hash != state.last_block_hash
        || hd.validators_hash != state.validators.hash()
        || hd.consensus_params_hash != state.consensus_params.hash()
        || hd.last_results_hash != state.last_results_hash
    {
        return Err(format!(
            "the state rebuilt at height {h} does not match block {}'s header",
            h + 1
        ));
    }
    Ok(state)
}

/// Runs `flushpoint rollback`.
pub fn run(a: &RollbackArgs) -> CliResult<()> {
    let home_path = super::resolve_home(a.home.as_deref());
    let err = |e: flushpoint::Error| describe(&e, &home_path);
    let h = a.to;
    let home = Home::open_existing(&home_path).map_err(err)?;
    let intent = read_intent(&home_path);

    let open_stores = |home: &Home| -> flushpoint::Result<(BlockStore, StateStore, u64)> {
        let bs = BlockStore::open(home.block_store_db.clone() as Arc<dyn Db>)?;
        let st = StateStore::open(home.state_db.clone() as Arc<dyn Db>);
        let app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>)))?;
        let app_h = flushpoint::App::durable(&app)?.height;
        Ok((bs, st, app_h))
    };
    let (bs, st, _) = open_stores(&home).map_err(err)?;
    let app =
        KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>))).map_err(err)?;
    let (state, o) = flushpoint::observe(&bs, &st, &app).map_err(err)?;
    drop(app);
    let Some(mut cur) = state else {
        return Err(CliError::failure(format!(
            "home {} has no saved state: nothing to roll back",
            home_path.display()
        )));
    };
    let finishing = intent.is_some_and(|t| t == h && o.state_height == h);
    if let Some(t) = intent
        && t != h
    {
        return Err(CliError::usage(format!(
            "an interrupted rollback to {t} is in progress in {}: finish it with `flushpoint rollback --to {t}` first",
            home_path.display()
        )));
    }
    let (mut bs, mut st) = (bs, st);
    if !finishing {
        match classify(&o) {
            Ok(HandshakeCase::FlushRollForward)
            | Ok(HandshakeCase::AppBehind)
            | Ok(HandshakeCase::BlockStoreAhead)
            | Ok(HandshakeCase::StateBehindApp)
                if a.repair =>
            {
                // Run the handshake's repair first, then continue from the repaired home.
                let spec = ChainSpec::new(1, flushpoint::Profile::Light);
                let app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>)))
                    .map_err(err)?;
                let (node, report) = Node::open(
                    home.block_store_db.clone(),
                    home.state_db.clone(),
                    Box::new(app),
                    &spec.genesis(),
                    Box::new(NoEvents),
                )
                .map_err(err)?;
                println!("{}", super::sync::handshake_text(&report));
                node.stop(std::time::Instant::now()).map_err(err)?;
                let (b2, s2, _) = open_stores(&home).map_err(err)?;
                cur = s2
                    .load_state()
                    .map_err(err)?
                    .ok_or_else(|| CliError::failure("the repair left no state"))?;
                bs = b2;
                st = s2;
            }
            Ok(HandshakeCase::FlushRollForward) => {
                return Err(CliError::failure(format!(
                    "home {} was left by a crash inside a flush point (block store {}, state {}, flush record {}): the handshake repairs it by rolling forward; run `flushpoint sync --home {}` once, or rerun this with --repair",
                    home_path.display(),
                    o.block_store_height,
                    o.state_height,
                    o.record.map_or("none".into(), |r| r.to_string()),
                    home_path.display()
                )));
            }
            Ok(_) => {}
            Err(reason) => {
                return Err(CliError::failure(format!(
                    "refusing to roll back home {}: block store {}, state {}, app {}: {reason}; nothing was changed",
                    home_path.display(),
                    o.block_store_height,
                    o.state_height,
                    o.app_height
                )));
            }
        }
    }
    let (_, _, app_h) = open_stores(&home).map_err(err)?;
    let (b, s) = (bs.height(), cur.last_block_height);
    if h < app_h {
        return Err(CliError::usage(format!(
            "cannot roll back to {h}: the app is at {app_h} and the demo app cannot roll back (it keeps no undo log); roll back to {app_h} or higher, or restore the app database from a backup or resync a new home"
        )));
    }
    if h >= b && h >= s {
        println!("nothing to do: block store {b}, state {s}, app {app_h} are all at or below {h}");
        return Ok(());
    }
    if h + 1 < bs.base().max(1) {
        return Err(CliError::usage(format!(
            "cannot roll back to {h}: the block store's lowest block is {} (pruned below)",
            bs.base()
        )));
    }
    let io = |what: &'static str| {
        let p = home_path.clone();
        move |e: std::io::Error| {
            CliError::failure(format!(
                "home {}: {what}: {e}; nothing was rolled back",
                p.display()
            ))
        }
    };
    if !finishing {
        // Rebuild first: nothing is written if any input is missing or inconsistent.
        let new_state = if h < s {
            Some(rebuild_state(&bs, &st, &cur, h).map_err(|m| {
                CliError::failure(format!("cannot roll back to {h}: {m}; nothing was changed"))
            })?)
        } else {
            None
        };
        // Step 1: the intent, durable before any database changes.
        write_intent(&home_path, h).map_err(io("write the rollback intent file"))?;
        // Step 2: the state (its rebuild needed block h+1, which step 3 removes).
        if let Some(ns) = new_state {
            st.rollback_to(&ns, s).map_err(err)?;
        }
    } else {
        println!("finishing an interrupted rollback to {h}");
    }
    // Step 3: the block store, top down.
    let removed = bs.rollback_to(h).map_err(err)?;
    // Step 4: only now is the home consistent again.
    remove_intent(&home_path).map_err(|e| {
        CliError::failure(format!(
            "home {}: rolled back, but could not remove {INTENT_FILE}: {e}; remove it by hand",
            home_path.display()
        ))
    })?;
    println!(
        "rolled back to height {h}: removed {removed} block(s) (block store was {b}, state {s}, app {app_h}); the next `flushpoint sync` continues from {h}"
    );
    Ok(())
}
