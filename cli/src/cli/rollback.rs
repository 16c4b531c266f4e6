//! `flushpoint rollback`: lowers a home's app, block store and state to a height H,
//! consistently, through the library's [`flushpoint::rollback`] (its module docs and
//! `adr/0006-rollback-in-the-library.md` give the steps and the crash table).
//!
//! The demo app keeps an undo log of [`flushpoint::demo::UNDO_RETENTION_BLOCKS`] blocks, so H may
//! be below the app's height by at most that many blocks. A crash midway leaves the intent
//! file `ROLLBACK-IN-PROGRESS`: rerunning the same command finishes the rollback, and no node
//! starts on the home until then (`Home::open` finishes it or refuses).
//!
//! This module only opens the home and the app, runs the optional `--repair` (the
//! handshake's roll-forward, which the library refuses to roll back over) and turns the
//! library's typed errors into one-line messages.
//!
//! Invariant: a refusal, or a rollback with nothing to do, is decided on a read-only open
//! and leaves every file as it was; only a rollback that goes through opens the home for
//! writing.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use flushpoint::demo::{ChainSpec, KvApp};
use flushpoint::node::{classify, observe};
use flushpoint::{Db, Error, HandshakeCase, HoldingDb, Home, NoEvents, Node, RollbackRefusal};

use super::error::{CliError, CliResult, describe};
use super::flags::resolve_home;
use super::handshake::handshake_text;
use super::out::outln;

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

fn open_app(home: &Home) -> flushpoint::Result<KvApp<Arc<dyn Db>>> {
    KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>)))
}

/// `--repair`: runs the handshake (and its repair) when the home has a repairable shape and
/// no interrupted rollback (whose half-lowered shape the handshake would undo).
fn repair(home: &Home, print: bool) -> flushpoint::Result<()> {
    if flushpoint::home::pending_rollback(home)?.is_some() {
        return Ok(());
    }
    let (_, o) = {
        let bs = flushpoint::store::BlockStore::<flushpoint::demo::Block>::open(
            home.block_store_db.clone() as Arc<dyn Db>,
        )?;
        let st = flushpoint::store::StateStore::<flushpoint::demo::DemoChain>::open(
            home.state_db.clone() as Arc<dyn Db>,
        );
        observe(&bs, &st, &open_app(home)?)?
    };
    if let Ok(
        HandshakeCase::FlushRollForward
        | HandshakeCase::AppBehind
        | HandshakeCase::BlockStoreAhead
        | HandshakeCase::StateBehindApp,
    ) = classify(&o)
    {
        let spec = ChainSpec::new(1, flushpoint::demo::Profile::Light);
        let (node, report) = Node::open(
            home.block_store_db.clone(),
            home.state_db.clone(),
            Box::new(open_app(home)?),
            spec.chain(),
            Box::new(NoEvents),
        )?;
        if print {
            outln!("{}", handshake_text(&report));
        }
        node.stop(std::time::Instant::now())?;
    }
    Ok(())
}

/// Opens the home on `fs` and runs the rollback (`--repair` first); prints what the repair
/// did when `print`.
fn roll(
    home_path: &std::path::Path,
    a: &RollbackArgs,
    fs: Arc<dyn flushpoint::fs::FileSystem>,
    print: bool,
) -> flushpoint::Result<flushpoint::RollbackReport> {
    let home = Home::open_for_rollback_on(fs, home_path, flushpoint::HomeOptions::default())?;
    if a.repair {
        repair(&home, print)?;
    }
    let mut app = open_app(&home)?;
    flushpoint::rollback(
        &home,
        &mut app,
        &ChainSpec::new(1, flushpoint::demo::Profile::Light).chain(),
        a.to,
    )
}

/// Runs `flushpoint rollback`.
pub fn run(a: &RollbackArgs) -> CliResult<()> {
    let home_path = resolve_home(a.home.as_deref());
    let h = a.to;
    let shown = home_path.display();
    // First on a read-only open: a refusal (or nothing to do) leaves every file as it was;
    // only a rollback that goes through opens the home for writing and runs again.
    let mut outcome = roll(&home_path, a, Home::read_only_fs(), false);
    if matches!(&outcome, Ok(r) if !r.nothing_to_do || a.repair) {
        outcome = roll(&home_path, a, Arc::new(flushpoint::fs::StdFs), true);
    }
    let r = match outcome {
        Ok(r) => r,
        Err(e) => {
            return Err(match &e {
                Error::RollbackRefused {
                    heights, reason, ..
                } => match reason {
                    RollbackRefusal::NeedsRepair { record } => CliError::failure(format!(
                        "home {shown} was left by a crash inside a flush point (block store {}, state {}, flush record {record}): the handshake repairs it by rolling forward; run `flushpoint sync --home {shown}` once, or rerun this with --repair",
                        heights.block_store_height, heights.state_height,
                    )),
                    RollbackRefusal::OtherInProgress { in_progress: t } => {
                        CliError::usage(format!(
                            "an interrupted rollback to {t} is in progress in {shown}: finish it with `flushpoint rollback --to {t}` first"
                        ))
                    }
                    RollbackRefusal::BelowBase { .. } => CliError::usage(e.to_string()),
                    RollbackRefusal::NoState => CliError::failure(format!(
                        "home {shown} has no saved state: nothing to roll back"
                    )),
                    _ => CliError::failure(format!("home {shown}: {e}")),
                },
                Error::AppCannotRollBack {
                    lowest, app_height, ..
                } => CliError::usage(format!(
                    "{e}; roll back to {} or higher, or restore the app database from a backup or resync a new home",
                    lowest.unwrap_or(*app_height)
                )),
                _ => describe(&e, &home_path),
            });
        }
    };
    let b = r.before;
    if r.nothing_to_do {
        outln!(
            "nothing to do: block store {}, state {}, app {} are all at or below {h}",
            b.block_store_height,
            b.state_height,
            b.app_height
        );
        return Ok(());
    }
    if r.finished_interrupted {
        outln!("finishing an interrupted rollback to {h}");
    }
    outln!(
        "rolled back to height {h}: removed {} block(s){} (block store was {}, state {}, app {}); the next `flushpoint sync` continues from {h}",
        r.blocks_removed,
        if r.app_rolled_back {
            ", the app rolled back with its undo log"
        } else {
            ""
        },
        b.block_store_height,
        b.state_height,
        b.app_height
    );
    Ok(())
}
