//! The quick mode runs in CI: every contender's row is in the table, every outcome check
//! passed, and a planted wrong oracle answer is rejected end to end (FAIL, non-zero exit).

use std::path::PathBuf;
use std::process::{Command, Output};

fn compare(args: &[&str], dir: &str, sabotage: Option<&str>) -> (Output, String) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_compare"));
    cmd.args(args).arg("--dir").arg(&dir);
    match sabotage {
        Some(s) => cmd.env("COMPARE_SABOTAGE", s),
        None => cmd.env_remove("COMPARE_SABOTAGE"),
    };
    let out = cmd.output().expect("run compare");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    (out, text)
}

const ROWS: &[&str] = &[
    "fp-deferred",
    "fp-per-block",
    "fpj-deferred",
    "fpj-per-block",
    "fpj-unit",
    "fpj-save-block",
    "fp-legacy",
    "fp-no-sync",
    "fp-memory",
    "fjall-sync",
    "fjall-buffered",
    "redb-block",
    "redb-window",
    "raw-sync",
    "raw-sync-blocks",
    "raw-seq",
];
const ROCKS_ROWS: &[&str] = &["rocks-sync", "rocks-nosync"];

/// The rows of the table printed after `## {profile} blocks`.
fn rows_of<'a>(text: &'a str, profile: &str) -> Vec<&'a str> {
    text.split(&format!("## {profile} blocks"))
        .nth(1)
        .unwrap_or_else(|| panic!("no {profile} table in:\n{text}"))
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .collect()
}

#[test]
fn quick_mode_prints_every_contender_and_every_check_passes() {
    let (out, text) = compare(&["--quick"], "quick", None);
    assert!(out.status.success(), "quick run failed:\n{text}");
    for profile in ["light", "heavy"] {
        let rows = rows_of(&text, profile);
        let mut want: Vec<&str> = ROWS.to_vec();
        if cfg!(feature = "rocksdb") {
            want.extend(ROCKS_ROWS);
        }
        for name in &want {
            let row = rows
                .iter()
                .find(|r| r.starts_with(&format!("| {name} |")))
                .unwrap_or_else(|| panic!("no {name} row in the {profile} table:\n{text}"));
            assert!(!row.contains("FAIL"), "{row}");
        }
        assert_eq!(
            rows.len(),
            want.len(),
            "{profile}: unexpected rows:\n{text}"
        );
        if !cfg!(feature = "rocksdb") {
            assert!(!rows.iter().any(|r| r.contains("rocks")), "{text}");
        }
    }
    assert!(
        text.contains("checked against their oracles before timing: PASS"),
        "{text}"
    );
    assert!(text.contains("held point read:"), "{text}");
    assert!(
        text.contains("checks: every outcome check passed: PASS"),
        "{text}"
    );
    assert!(!text.contains("FAIL"), "{text}");
}

#[test]
fn a_wrong_index_oracle_answer_is_rejected() {
    let (out, text) = compare(&["index", "--quick"], "sabotage-index", Some("index-hash"));
    assert!(
        !out.status.success(),
        "a planted wrong hash passed:\n{text}"
    );
    assert!(text.contains("FAIL: index outcome check"), "{text}");
    assert!(text.contains("block by height"), "{text}");
}

#[test]
fn a_wrong_height_oracle_answer_fails_the_write_row() {
    let (out, text) = compare(
        &["scale", "--heights", "50"],
        "sabotage-heights",
        Some("heights"),
    );
    assert!(
        !out.status.success(),
        "a planted wrong height passed:\n{text}"
    );
    assert!(
        text.contains("FAIL") && text.contains("durable heights"),
        "{text}"
    );
}

/// `fpj-save-block`'s outcome check (the block store's height after its saves) rejects a
/// planted wrong answer, and `--contenders` runs that row alone.
#[test]
fn a_wrong_height_oracle_answer_fails_the_save_block_row() {
    let (out, text) = compare(
        &["--quick", "--no-index", "--contenders", "fpj-save-block"],
        "sabotage-save-block",
        Some("heights"),
    );
    assert!(
        !out.status.success(),
        "a planted wrong height passed:\n{text}"
    );
    for profile in ["light", "heavy"] {
        let rows = rows_of(&text, profile);
        assert_eq!(rows.len(), 1, "{profile}: only the row asked for:\n{text}");
        assert!(
            rows[0].starts_with("| fpj-save-block |")
                && rows[0].contains("FAIL")
                && rows[0].contains("block store height after save_block"),
            "{text}"
        );
    }
}

/// An unknown row name is refused before anything runs.
#[test]
fn an_unknown_contender_is_refused() {
    let (out, text) = compare(&["--quick", "--contenders", "fpj-nothing"], "unknown", None);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("error: --contenders: no contender fpj-nothing"),
        "{text}"
    );
    assert!(!text.contains("shape of a light block"), "{text}");
}
