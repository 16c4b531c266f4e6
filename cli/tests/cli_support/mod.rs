//! Helpers for the CLI tests: run the built `flushpoint` binary on temp homes.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_flushpoint");

/// Runs the binary with `args` (no FLUSHPOINT_HOME from the environment).
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("FLUSHPOINT_HOME")
        .env_remove("FLUSHPOINT_CRASH_TEST")
        .output()
        .expect("run flushpoint")
}

/// True when `FLUSHPOINT_FULL=1`: the long tests run their whole sweep, not CI's slice.
pub fn full() -> bool {
    std::env::var("FLUSHPOINT_FULL").is_ok_and(|v| v == "1")
}

/// Stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `sync --json` on `home` (a new home on the default engine, the journal); returns the
/// parsed summary.
pub fn sync_json(home: &Path, blocks: u64, consensus: u64, seed: u64) -> serde_json::Value {
    sync_json_on(home, None, blocks, consensus, seed)
}

/// `sync --json` on `home` with `--engine engine` when `Some`; returns the parsed summary.
pub fn sync_json_on(
    home: &Path,
    engine: Option<&str>,
    blocks: u64,
    consensus: u64,
    seed: u64,
) -> serde_json::Value {
    let (blocks, consensus, seed) = (blocks.to_string(), consensus.to_string(), seed.to_string());
    let mut args = vec![
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--blocks",
        &blocks,
        "--consensus-blocks",
        &consensus,
        "--seed",
        &seed,
        "--json",
    ];
    if let Some(e) = engine {
        args.extend(["--engine", e]);
    }
    let o = run(&args);
    assert!(o.status.success(), "sync failed: {}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().last().expect("a JSON line");
    serde_json::from_str(line).expect("sync --json prints one JSON object")
}

/// Starts `sync` with crash-test markers and the marker gate on, answers each marker until
/// the first line starting with `@fp <marker>`, and SIGKILLs the child while it waits at
/// that marker: the kill lands exactly there, however loaded the machine. Panics if the
/// marker never shows (the kill must fire). A new home is created on redb: its flush point
/// is three synced writes, so a kill between the markers of two steps leaves the shapes the
/// handshake repairs (a journal home's flush point is one unit: whole or absent).
pub fn sync_killed_at(home: &Path, blocks: u64, flush_every: u64, seed: u64, marker: &str) {
    let mut child = Command::new(BIN)
        .args([
            "sync",
            "--home",
            home.to_str().unwrap(),
            "--blocks",
            &blocks.to_string(),
            "--consensus-blocks",
            "2",
            "--flush-every",
            &flush_every.to_string(),
            "--seed",
            &seed.to_string(),
            "--engine",
            "redb",
            "--json",
        ])
        .env_remove("FLUSHPOINT_HOME")
        .env("FLUSHPOINT_CRASH_TEST", "1")
        .env("FLUSHPOINT_TEST_MARKER_GATE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sync");
    let mut gate = child.stdin.take().unwrap();
    let out = child.stdout.take().unwrap();
    let want = format!("@fp {marker}");
    let mut fired = false;
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if line.starts_with(&want) {
            // The child waits at this marker for our line: kill it there.
            child.kill().unwrap();
            fired = true;
            break;
        }
        if line.starts_with("@fp") {
            gate.write_all(b"\n").and_then(|()| gate.flush()).unwrap();
        }
    }
    drop(gate);
    child.wait().unwrap();
    assert!(
        fired,
        "marker {marker:?} never printed: the kill did not fire"
    );
}
