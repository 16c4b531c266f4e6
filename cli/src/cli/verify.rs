//! `flushpoint verify`: reads every record and part of a home through a read-only open and
//! reports what is damaged and where ([`flushpoint::verify()`]); exit 1 if anything is.
//!
//! Read-only: the home is opened on a copy-on-write layer ([`Home::open_read_only`]'s),
//! so every file is opened for reading only and the home is left byte for byte as it was
//! — an interrupted rollback or a crash's shape included (reported, not repaired).
//!
//! Invariant: writes nothing to the home; exits 1 exactly when a problem was found (or the
//! home could not be opened, reported as its one problem).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use flushpoint::demo::KvApp;
use flushpoint::{HoldingDb, Home, HomeOptions, VerifyReport};
use serde::Serialize;

use super::error::{CliError, CliResult, describe};
use super::flags::resolve_home;
use super::out::outln;

/// `flushpoint verify` flags.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Home directory [default: $FLUSHPOINT_HOME, else ./flushpoint-home]
    #[arg(long)]
    pub home: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// One problem, as `--json` prints it.
#[derive(Debug, Serialize)]
struct ProblemJson<'a> {
    db: &'a str,
    check: &'a str,
    height: Option<u64>,
    kind: String,
    detail: &'a str,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct VerifyJson<'a> {
    home: String,
    engine: Option<String>,
    clean: bool,
    /// Entries read per database.
    entries: Entries,
    blocks: u64,
    parts: u64,
    state_heights: u64,
    block_store_base: u64,
    block_store_height: u64,
    state_height: u64,
    app_height: u64,
    /// The handshake's case when the shape is one a crash leaves (`null` otherwise).
    case: Option<&'static str>,
    problems_total: u64,
    problems: Vec<ProblemJson<'a>>,
}

#[derive(Debug, Serialize)]
struct Entries {
    block_store: u64,
    state: u64,
    app: u64,
}

/// Runs `flushpoint verify`.
pub fn run(a: &VerifyArgs) -> CliResult<()> {
    let home_path = resolve_home(a.home.as_deref());
    // An open that refuses is the home's damage: reported as its one problem.
    let opened =
        Home::open_for_rollback_on(Home::read_only_fs(), &home_path, HomeOptions::default())
            .and_then(|home| {
                let app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone())))?;
                let report = flushpoint::verify(&home, &app);
                Ok((home.engine(), report))
            });
    let (engine, report) = match opened {
        Ok(r) => r,
        Err(e) => {
            let message = describe(&e, &home_path).message;
            if a.json {
                let j = serde_json::json!({
                    "home": home_path.display().to_string(),
                    "engine": null,
                    "clean": false,
                    "problems_total": 1,
                    "problems": [{
                        "db": "home", "check": "open", "height": null,
                        "kind": format!("{:?}", e.kind()), "detail": e.to_string(),
                    }],
                });
                outln!("{j}");
            }
            return Err(CliError::failure(format!("verify: {message}")));
        }
    };
    if a.json {
        outln!("{}", json(&home_path, engine, &report));
    } else {
        print_human(&home_path, engine, &report);
    }
    if report.is_clean() {
        Ok(())
    } else {
        Err(CliError::failure(format!(
            "verify: home {} is damaged ({} problem(s)): restore the files named (or the whole home) from a backup, or sync a new home",
            home_path.display(),
            report.problems_total
        )))
    }
}

fn json(home: &std::path::Path, engine: flushpoint::HomeEngine, r: &VerifyReport) -> String {
    let c = &r.counts;
    let j = VerifyJson {
        home: home.display().to_string(),
        engine: Some(engine.to_string()),
        clean: r.is_clean(),
        entries: Entries {
            block_store: c.entries[0],
            state: c.entries[1],
            app: c.entries[2],
        },
        blocks: c.blocks,
        parts: c.parts,
        state_heights: c.state_heights,
        block_store_base: r.block_store.0,
        block_store_height: r.block_store.1,
        state_height: r.state_height,
        app_height: r.app_height,
        case: r.case.map(|c| c.name()),
        problems_total: r.problems_total,
        problems: r
            .problems
            .iter()
            .map(|p| ProblemJson {
                db: p.db,
                check: &p.check,
                height: p.height,
                kind: format!("{:?}", p.kind),
                detail: &p.detail,
            })
            .collect(),
    };
    serde_json::to_string(&j).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn print_human(home: &std::path::Path, engine: flushpoint::HomeEngine, r: &VerifyReport) {
    let c = &r.counts;
    outln!(
        "flushpoint verify: home {} ({engine} engine)",
        home.display()
    );
    outln!(
        "read: {} block store, {} state, {} app entries ({} bytes); {} blocks with {} parts; {} state heights",
        c.entries[0],
        c.entries[1],
        c.entries[2],
        c.bytes.iter().sum::<u64>(),
        c.blocks,
        c.parts,
        c.state_heights
    );
    outln!(
        "heights: block store {}..={}, state {}, app {}{}",
        r.block_store.0,
        r.block_store.1,
        r.state_height,
        r.app_height,
        match r.case {
            Some(flushpoint::HandshakeCase::Consistent) | None => String::new(),
            Some(case) => format!(
                " (a crash's shape: {}; the next sync repairs it)",
                case.name()
            ),
        }
    );
    for p in &r.problems {
        let at = p
            .height
            .map_or(String::new(), |h| format!(" at height {h}"));
        outln!("damaged: {} {}{at}: {}", p.db, p.check, p.detail);
    }
    if r.problems_total > r.problems.len() as u64 {
        outln!(
            "… and {} more problem(s)",
            r.problems_total - r.problems.len() as u64
        );
    }
    if r.is_clean() {
        outln!("clean: every record, part and cross-reference checked");
    }
}
