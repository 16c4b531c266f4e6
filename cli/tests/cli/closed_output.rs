//! A closed stdout or stderr (`flushpoint sync | head -1`) never panics: the command stops
//! cleanly (a sync stops its node first), exits 141, and the home opens consistent.

use crate::cli_support::*;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Exit code of a command whose stdout or stderr was a closed pipe.
const EXIT_OUTPUT_CLOSED: i32 = 141;

/// A pipe whose read end is already closed: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    Stdio::from(writer)
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("FLUSHPOINT_HOME")
        .env_remove("FLUSHPOINT_CRASH_TEST")
        .stdin(Stdio::null());
    c
}

/// Runs `args` with stdout a closed pipe; stderr is captured.
fn with_closed_stdout(args: &[&str]) -> Output {
    command(args)
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .expect("run flushpoint")
}

fn assert_no_panic(o: &Output, what: &str) {
    let e = stderr(o);
    assert!(!e.contains("panicked"), "{what} panicked: {e}");
    assert_ne!(o.status.code(), Some(101), "{what} exited 101: {e}");
}

/// `inspect` of `home` succeeds and classifies it consistent; returns its JSON.
fn assert_consistent(home: &Path) -> serde_json::Value {
    let o = run(&["inspect", "--home", home.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "inspect: {}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("inspect JSON");
    assert_eq!(j["classification"]["verdict"], "consistent", "{j}");
    j
}

#[test]
fn a_sync_whose_stdout_is_closed_stops_cleanly_and_exits_141() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    // Human output: the first header line fails, and the sync stops before its first block.
    let o = with_closed_stdout(&["sync", "--home", home.to_str().unwrap(), "--blocks", "400"]);
    assert_no_panic(&o, "sync");
    assert_eq!(o.status.code(), Some(EXIT_OUTPUT_CLOSED), "{}", stderr(&o));
    assert!(stderr(&o).trim().is_empty(), "not quiet: {}", stderr(&o));
    let j = assert_consistent(&home);
    assert!(
        j["heights"]["block_store"].as_u64().unwrap() < 400,
        "the sync did not stop: {j}"
    );
    // The home resumes.
    let s = sync_json(&home, 40, 2, 1);
    assert_eq!(s["heights"]["state"], 42, "{s}");
}

#[test]
fn a_json_sync_whose_stdout_is_closed_completes_and_exits_141() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    // `--json` prints only at the end: the whole run is done and stopped before it fails.
    let o = with_closed_stdout(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--blocks",
        "60",
        "--consensus-blocks",
        "2",
        "--json",
    ]);
    assert_no_panic(&o, "sync --json");
    assert_eq!(o.status.code(), Some(EXIT_OUTPUT_CLOSED), "{}", stderr(&o));
    let j = assert_consistent(&home);
    assert_eq!(j["heights"]["state"], 62, "{j}");
}

#[test]
fn reading_one_line_then_closing_the_pipe_leaves_a_consistent_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    // `flushpoint sync | head -1`.
    let mut child = command(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--blocks",
        "2000",
        "--engine",
        "journal",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn sync");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("flushpoint sync"), "{first:?}");
    let o = child.wait_with_output().unwrap();
    assert_no_panic(&o, "sync | head -1");
    // 141 once a write failed; 0 only if the child wrote all before the pipe closed.
    assert!(
        matches!(o.status.code(), Some(EXIT_OUTPUT_CLOSED | 0)),
        "{:?}: {}",
        o.status,
        stderr(&o)
    );
    assert_consistent(&home);
}

#[test]
fn other_commands_with_a_closed_stdout_exit_141_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    sync_json(&home, 20, 1, 1);
    let h = home.to_str().unwrap();
    for args in [
        vec!["inspect", "--home", h],
        vec!["inspect", "--home", h, "--json"],
        vec!["rollback", "--home", h, "--to", "18"],
    ] {
        let o = with_closed_stdout(&args);
        assert_no_panic(&o, &args.join(" "));
        assert_eq!(
            o.status.code(),
            Some(EXIT_OUTPUT_CLOSED),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert_consistent(&home);
}

#[test]
fn a_failure_with_a_closed_stderr_keeps_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let run_closed_stderr = |args: &[&str]| {
        command(args)
            .stdout(Stdio::null())
            .stderr(closed_pipe())
            .status()
            .expect("run flushpoint")
            .code()
    };
    // The one-line message cannot be written; the exit code still says what happened.
    assert_eq!(
        run_closed_stderr(&["inspect", "--home", missing.to_str().unwrap()]),
        Some(1)
    );
    assert_eq!(
        run_closed_stderr(&["sync", "--profile", "gigantic"]),
        Some(2)
    );
    assert!(!missing.exists());
}
