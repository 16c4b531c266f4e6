//! `flushpoint inspect` and `flushpoint rollback` on real homes: inspect classifies without
//! changing anything; rollback refuses what the app cannot follow and what a flush-point
//! crash left (until repaired), and a rollback followed by a sync reaches the uncut hash.

use crate::cli_support::*;

fn inspect(home: &std::path::Path) -> serde_json::Value {
    let o = run(&["inspect", "--home", home.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap()
}

#[test]
fn inspect_reports_a_flush_point_crash_as_roll_forward_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    sync_killed_at(&home, 30, 10, 1, "flush-write-done block-store");
    let j = inspect(&home);
    assert_eq!(j["classification"]["verdict"], "repairable");
    assert_eq!(j["classification"]["case"], "flush-roll-forward");
    assert_eq!(j["heights"]["block_store"], 10);
    assert_eq!(j["heights"]["state"], 0);
    assert_eq!(j["flush_record"]["to"], 10);
    assert_eq!(
        inspect(&home)["heights"],
        j["heights"],
        "inspect changed the home"
    );

    // Rollback refuses this home and says how to repair it…
    let o = run(&["rollback", "--home", home.to_str().unwrap(), "--to", "5"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("flushpoint sync"), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim().lines().count(), 1);
    // …and with --repair rolls forward first, then back to 5 (the app is at 10 after
    // the repair, so 5 is refused; 10 is a no-op).
    let o = run(&[
        "rollback",
        "--home",
        home.to_str().unwrap(),
        "--to",
        "10",
        "--repair",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(inspect(&home)["classification"]["case"], "consistent");
}

#[test]
fn rollback_below_the_app_is_refused_and_rollback_above_it_then_sync_matches_uncut() {
    let dir = tempfile::tempdir().unwrap();
    let reference = sync_json(&dir.path().join("ref"), 30, 2, 1);

    let done = dir.path().join("done");
    sync_json(&done, 30, 2, 1);
    let o = run(&["rollback", "--home", done.to_str().unwrap(), "--to", "10"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot roll back"), "{}", stderr(&o));
    assert_eq!(
        inspect(&done)["heights"]["state"],
        32,
        "a refused rollback changed the home"
    );

    // Killed between a flush point's state and app steps: (10, 10, 0).
    let home = dir.path().join("home");
    sync_killed_at(&home, 30, 10, 1, "flush-write-done state");
    let j = inspect(&home);
    assert_eq!(j["classification"]["case"], "app-behind");
    let o = run(&["rollback", "--home", home.to_str().unwrap(), "--to", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = inspect(&home);
    assert_eq!(j["heights"]["block_store"], 4);
    assert_eq!(j["heights"]["state"], 4);
    let o = run(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--blocks",
        "30",
        "--consensus-blocks",
        "2",
        "--seed",
        "1",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(j["handshake"]["case"], "app-behind");
    assert_eq!(j["heights"], reference["heights"]);
    assert_eq!(j["app_hash"], reference["app_hash"]);
}

#[test]
fn rollback_below_the_app_within_its_undo_window_then_sync_matches_uncut() {
    let dir = tempfile::tempdir().unwrap();
    let reference = sync_json(&dir.path().join("ref"), 30, 2, 1);
    let home = dir.path().join("home");
    sync_json(&home, 30, 2, 1);
    // 32 blocks: the undo window reaches down to 32 − 16 = 16.
    let to = 32 - flushpoint::demo::UNDO_RETENTION_BLOCKS;
    let o = run(&[
        "rollback",
        "--home",
        home.to_str().unwrap(),
        "--to",
        &(to - 1).to_string(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("roll back to {to} or higher")),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "rollback",
        "--home",
        home.to_str().unwrap(),
        "--to",
        &to.to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("undo log"), "{}", stdout(&o));
    let j = inspect(&home);
    assert_eq!(j["classification"]["case"], "consistent");
    for db in ["block_store", "state", "app"] {
        assert_eq!(j["heights"][db], to, "{db}: {j}");
    }
    let again = sync_json(&home, 30, 2, 1);
    assert_eq!(again["heights"], reference["heights"]);
    assert_eq!(again["app_hash"], reference["app_hash"]);
}

/// A home holding an interrupted rollback (here the older tool's text intent, written before
/// its first database change): `sync` refuses it naming the command that finishes it,
/// `inspect` shows it and changes nothing, and that command finishes it.
#[test]
fn an_interrupted_rollback_is_refused_by_sync_shown_by_inspect_and_finished_by_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    sync_json(&home, 30, 2, 1);
    std::fs::write(home.join(flushpoint::home::ROLLBACK_INTENT_FILE), "20\n").unwrap();
    let h = home.to_str().unwrap();
    let o = run(&[
        "sync",
        "--home",
        h,
        "--blocks",
        "30",
        "--consensus-blocks",
        "2",
        "--seed",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(&format!("flushpoint rollback --home {h} --to 20")),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).trim().lines().count(), 1);
    let j = inspect(&home);
    assert_eq!(j["rollback_in_progress"], 20);
    assert_eq!(j["classification"]["verdict"], "rollback-in-progress");
    assert_eq!(j["heights"]["state"], 32, "inspect changed the home");
    let o = run(&["rollback", "--home", h, "--to", "20"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j = inspect(&home);
    assert_eq!(j["rollback_in_progress"], serde_json::Value::Null);
    assert_eq!(j["classification"]["case"], "consistent");
    assert_eq!(j["heights"]["app"], 20);
}
