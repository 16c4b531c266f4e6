//! Every command that refuses leaves every file of the home byte for byte as it was, on
//! either engine: `sync` with another chain's genesis, with a target below the home, with
//! the other engine, on a home that lost its `FORMAT`; `rollback` below what the app can
//! undo; and the commands that only read (`inspect`, `rollback` with nothing to do). Each
//! case snapshots the home before and after and names the first file and byte that differ.

use crate::cli_support::*;
use flushpoint::testing::DirSnapshot;
use std::path::Path;

const ENGINES: [&str; 2] = ["redb", "journal"];

/// A home on `engine`: 30 block-synced blocks and 2 consensus blocks, seed 1.
fn home_on(dir: &Path, engine: &str) -> std::path::PathBuf {
    let home = dir.join(engine);
    let o = run(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--engine",
        engine,
        "--blocks",
        "30",
        "--consensus-blocks",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    home
}

/// Runs `args` (after `--home HOME`) on a fresh home of each engine; asserts the exit code
/// and that nothing under the home changed.
fn writes_nothing(
    what: &str,
    prepare: impl Fn(&Path),
    args: impl Fn(&str) -> Vec<String>,
    code: i32,
) {
    for engine in ENGINES {
        let dir = tempfile::tempdir().unwrap();
        let home = home_on(dir.path(), engine);
        prepare(&home);
        let before = DirSnapshot::take(&home).unwrap();
        let a = args(engine);
        let mut argv: Vec<&str> = vec![&a[0], "--home", home.to_str().unwrap()];
        argv.extend(a[1..].iter().map(String::as_str));
        let o = run(&argv);
        assert_eq!(
            o.status.code(),
            Some(code),
            "{engine} home, {what}: {}",
            stderr(&o)
        );
        let after = DirSnapshot::take(&home).unwrap();
        if let Some(d) = before.first_difference(&after) {
            panic!("{engine} home, {what} (exit {code}): wrote to the home: {d}");
        }
    }
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sync_with_another_genesis_writes_nothing() {
    writes_nothing(
        "sync --seed 2",
        |_| {},
        |_| strings(&["sync", "--blocks", "40", "--seed", "2"]),
        1,
    );
}

#[test]
fn sync_to_a_lower_target_writes_nothing() {
    writes_nothing(
        "sync --blocks 5",
        |_| {},
        |_| strings(&["sync", "--blocks", "5", "--consensus-blocks", "0"]),
        2,
    );
}

#[test]
fn sync_on_the_other_engine_writes_nothing() {
    writes_nothing(
        "sync --engine <other>",
        |_| {},
        |engine| {
            let other = if engine == "redb" { "journal" } else { "redb" };
            strings(&["sync", "--blocks", "40", "--engine", other])
        },
        1,
    );
}

#[test]
fn sync_on_a_home_without_its_format_writes_nothing() {
    writes_nothing(
        "sync without FORMAT",
        |home| std::fs::remove_file(home.join("FORMAT")).unwrap(),
        |_| strings(&["sync", "--blocks", "40"]),
        1,
    );
}

#[test]
fn rollback_below_the_app_s_window_writes_nothing() {
    writes_nothing(
        "rollback --to 1",
        |_| {},
        |_| strings(&["rollback", "--to", "1"]),
        2,
    );
}

#[test]
fn rollback_with_nothing_to_do_writes_nothing() {
    writes_nothing(
        "rollback --to 40",
        |_| {},
        |_| strings(&["rollback", "--to", "40"]),
        0,
    );
}

#[test]
fn inspect_writes_nothing() {
    writes_nothing(
        "inspect --json",
        |_| {},
        |_| strings(&["inspect", "--json"]),
        0,
    );
}

/// Negative control: the check sees a command that writes (a rollback that goes through).
#[test]
fn a_rollback_that_goes_through_is_seen_writing() {
    let dir = tempfile::tempdir().unwrap();
    let home = home_on(dir.path(), "redb");
    let before = DirSnapshot::take(&home).unwrap();
    let o = run(&["rollback", "--home", home.to_str().unwrap(), "--to", "25"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d = before.first_difference(&DirSnapshot::take(&home).unwrap());
    assert!(d.is_some(), "a rollback of 7 blocks changed nothing?");
}
