//! A height or count flag whose sum passes `u64::MAX` (`--blocks` + `--consensus-blocks`)
//! is a usage error, exit 2, reported before anything is written: no home, no work
//! directory.

use crate::cli_support::*;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A refused run ends at once; one still running after this is syncing a wrapped target.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(30);

const MAX: &str = "18446744073709551615";
const MAX_MINUS_1: &str = "18446744073709551614";

/// Runs the binary with `args`, killed (and the test failed) if it outlives
/// [`REFUSAL_DEADLINE`].
fn run_refused(args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("FLUSHPOINT_HOME")
        .env_remove("FLUSHPOINT_CRASH_TEST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flushpoint");
    let t0 = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > REFUSAL_DEADLINE {
            child.kill().expect("kill");
            let o = child.wait_with_output().expect("output");
            panic!(
                "{args:?} still ran after {REFUSAL_DEADLINE:?}, stdout: {}",
                stdout(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn assert_usage(o: &std::process::Output, what: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{what}: {e}");
    assert_eq!(e.trim().lines().count(), 1, "{what}: not one line: {e:?}");
    assert!(e.contains("--blocks"), "{what}: {e}");
    assert!(stdout(o).is_empty(), "{what} printed: {}", stdout(o));
}

#[test]
fn a_sync_whose_target_overflows_is_refused_before_the_home_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let h = home.to_str().unwrap();
    for flags in [
        // The default --consensus-blocks (20) on top.
        vec!["--blocks", MAX],
        vec!["--blocks", MAX_MINUS_1, "--consensus-blocks", "2"],
        vec!["--blocks", "1", "--consensus-blocks", MAX],
        vec![
            "--blocks",
            MAX,
            "--consensus-blocks",
            "1",
            "--engine",
            "journal",
        ],
    ] {
        let o = run_refused(&[&["sync", "--home", h][..], &flags].concat());
        assert_usage(&o, &flags.join(" "));
        assert!(!home.exists(), "{flags:?} created the home");
    }
}

#[test]
fn a_sync_of_an_existing_home_whose_target_overflows_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let before = sync_json(&home, 10, 1, 1);
    let o = run_refused(&["sync", "--home", home.to_str().unwrap(), "--blocks", MAX]);
    assert_usage(&o, "--blocks MAX on an existing home");
    let o = run(&["inspect", "--home", home.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let after: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(after["heights"], before["heights"]);
    assert_eq!(after["app_hash"], before["app_hash"]);
}

#[test]
fn a_crash_test_whose_runs_overflow_is_refused_before_its_work_dir_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let o = run_refused(&[
        "crash-test",
        "--kills",
        "1",
        "--blocks",
        MAX,
        "--work-dir",
        work.to_str().unwrap(),
    ]);
    assert_usage(&o, "crash-test --blocks MAX");
    assert!(!work.exists(), "crash-test created its work directory");
}
