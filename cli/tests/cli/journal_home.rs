//! The tool on a journal home (ADR 0012): `sync --engine journal` creates one and reports its
//! engine; a later `sync` without `--engine` resumes on it; `--engine redb` on it (and
//! `--engine journal` on a redb home) is refused with one line, exit 1, nothing changed;
//! `inspect` shows the engine and the journal; `rollback` works on it; and the real
//! `kill -9` loop (`crash-test --engine journal`) finds no mismatch — a few kills in CI,
//! `FLUSHPOINT_FULL=1` for 150.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::cli_support::*;

fn sync_engine(home: &Path, engine: Option<&str>, blocks: u64) -> std::process::Output {
    let mut args = vec![
        "sync".to_string(),
        "--home".into(),
        home.to_str().unwrap().into(),
        "--blocks".into(),
        blocks.to_string(),
        "--consensus-blocks".into(),
        "2".into(),
        "--json".into(),
    ];
    if let Some(e) = engine {
        args.extend(["--engine".into(), e.into()]);
    }
    run(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_str(stdout(o).lines().last().unwrap()).unwrap()
}

fn inspect(home: &Path) -> serde_json::Value {
    let o = run(&["inspect", "--home", home.to_str().unwrap(), "--json"]);
    json(&o)
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(tree(&e.path()));
        } else {
            out.insert(e.path(), std::fs::read(e.path()).unwrap());
        }
    }
    out
}

#[test]
fn sync_engine_journal_creates_a_journal_home_that_later_syncs_resume_on() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let j = json(&sync_engine(&home, Some("journal"), 40));
    assert_eq!(j["engine"], "journal");
    assert!(j["journal"]["disk_size_bytes"].as_u64().unwrap() > 0, "{j}");
    assert!(
        j["journal"]["counts"]["units_written"].as_u64().unwrap() > 0,
        "{j}"
    );
    assert!(j["fsyncs_per_block"]["sync_data_overall"].as_f64().unwrap() > 0.0);
    assert!(home.join("journal").is_dir());
    assert!(!home.join("state.redb").exists());
    assert_eq!(
        std::fs::read_to_string(home.join("FORMAT")).unwrap(),
        "flushpoint home format 2\nengine journal\nparts journal\napp runs\napp values journal\n"
    );
    // Unasked, the next sync resumes on the journal; the chain matches a redb home's.
    let again = json(&sync_engine(&home, None, 60));
    assert_eq!(again["engine"], "journal");
    assert_eq!(again["handshake"]["case"], "consistent");
    let redb = json(&sync_engine(&dir.path().join("redb"), Some("redb"), 60));
    assert_eq!(redb["engine"], "redb");
    // A redb home resumes on redb unasked; a new home unasked is a journal home (the
    // default engine).
    let redb_again = json(&sync_engine(&dir.path().join("redb"), None, 60));
    assert_eq!(redb_again["engine"], "redb");
    assert_eq!(redb_again["handshake"]["case"], "consistent");
    let unasked = json(&sync_engine(&dir.path().join("unasked"), None, 10));
    assert_eq!(unasked["engine"], "journal");
    assert!(redb["journal"].is_null());
    assert_eq!(again["heights"], redb["heights"]);
    assert_eq!(again["app_hash"], redb["app_hash"]);
}

#[test]
fn sync_with_another_engine_than_the_homes_is_refused_in_one_line_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (created, asked) in [("journal", "redb"), ("redb", "journal")] {
        let home = dir.path().join(created);
        json(&sync_engine(&home, Some(created), 10));
        let before = tree(&home);
        let o = sync_engine(&home, Some(asked), 20);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("created on the {created} engine, not {asked}")),
            "{err}"
        );
        assert!(err.contains(&format!("--engine {created}")), "{err}");
        assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        assert_eq!(
            tree(&home),
            before,
            "a refused sync changed the {created} home"
        );
    }
}

#[test]
fn inspect_shows_the_journal_and_rollback_then_sync_reaches_the_uncut_hash() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let reference = json(&sync_engine(&home, Some("journal"), 40));
    let i = inspect(&home);
    assert_eq!(i["engine"], "journal");
    assert_eq!(i["classification"]["case"], "consistent");
    let disk = i["journal"]["disk_size_bytes"].as_u64().unwrap();
    assert!(disk > 0, "{i}");
    assert_eq!(i["disk_size_bytes"]["journal"].as_u64(), Some(disk));
    assert!(i["disk_size_bytes"].get("state").is_none(), "{i}");
    assert_eq!(
        i["journal"]["applied_seq"], i["journal"]["checkpoint_seq"],
        "{i}"
    );
    // Usage: the three keyspaces, the block store's parts in the journal, and its share of
    // the disk (index pages and held segments) beside its logical bytes.
    let usage = &i["journal"]["usage"];
    let files = [
        "index_file_bytes",
        "held_segment_bytes",
        "other_segment_bytes",
        "run_file_bytes",
    ]
    .map(|f| usage[f].as_u64().unwrap());
    assert_eq!(files.iter().sum::<u64>(), disk, "{i}");
    let blocks = &usage["keyspaces"]["block store"];
    assert!(blocks["values_in_journal"].as_u64().unwrap() > 0, "{i}");
    assert_eq!(usage["keyspaces"]["app"]["values_in_journal"], 0, "{i}");
    let share = &i["journal"]["block_store"];
    assert_eq!(share["logical_bytes"], blocks["logical_bytes"], "{i}");
    assert_eq!(
        share["disk_bytes"].as_u64().unwrap(),
        blocks["index_bytes"].as_u64().unwrap() + files[1],
        "{i}"
    );
    let o = run(&["inspect", "--home", home.to_str().unwrap()]);
    assert!(stdout(&o).contains("(journal engine)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("on disk: journal"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("block store on disk:"),
        "{}",
        stdout(&o)
    );

    let o = run(&["rollback", "--home", home.to_str().unwrap(), "--to", "38"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let i = inspect(&home);
    assert_eq!(i["heights"]["state"], 38, "{i}");
    assert_eq!(i["heights"]["block_store"], 38, "{i}");
    assert_eq!(i["heights"]["app"], 38, "{i}");
    let again = json(&sync_engine(&home, None, 40));
    assert_eq!(again["engine"], "journal");
    assert_eq!(again["app_hash"], reference["app_hash"]);
    assert_eq!(again["heights"], reference["heights"]);
}

#[test]
fn kill_loop_on_a_journal_home_lands_kills_in_flush_points_and_finds_no_mismatch() {
    let full = full();
    let kills: u64 = if full { 150 } else { 8 };
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "crash-test",
        "--engine",
        "journal",
        "--kills",
        &kills.to_string(),
        "--seed",
        "3",
        "--blocks",
        "60",
        "--consensus-blocks",
        "3",
        "--flush-every",
        "10",
        "--json",
        "--work-dir",
        dir.path().to_str().unwrap(),
    ]);
    let j = json(&o);
    println!("crash-test --engine journal: {j}");
    assert_eq!(j["engine"], "journal");
    assert_eq!(
        j["reference"]["engine"], "journal",
        "the children ran on the journal"
    );
    assert_eq!(j["kills"], kills);
    assert_eq!(j["mismatches"], 0);
    assert_eq!(j["failures"], 0);
    assert!(j["completed_runs_compared"].as_u64().unwrap() >= 1, "{j}");
    assert!(j["kills_in_flush"].as_u64().unwrap() >= 1, "{j}");
    let by_marker: u64 = j["kills_by_marker"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(by_marker, kills, "every kill landed at a marker");
}
