//! `flushpoint verify` on real homes of both engines: a clean home exits 0 with `clean`
//! in its JSON; a zeroed page of a redb file and a flipped bit in a journal segment exit 1
//! naming the damage; a directory without a home exits 1; and verify writes nothing, clean
//! or damaged.

use crate::cli_support::*;
use flushpoint::testing::DirSnapshot;
use std::path::Path;

fn home_on(dir: &Path, engine: &str) -> std::path::PathBuf {
    let home = dir.join(engine);
    let o = run(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--engine",
        engine,
        "--blocks",
        "200",
        "--consensus-blocks",
        "3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    home
}

/// Runs `verify --json`; asserts it wrote nothing; returns the exit code and the JSON.
fn verify(home: &Path) -> (Option<i32>, serde_json::Value) {
    let before = DirSnapshot::take(home).unwrap();
    let o = run(&["verify", "--home", home.to_str().unwrap(), "--json"]);
    let after = DirSnapshot::take(home).unwrap();
    assert_eq!(
        before.first_difference(&after),
        None,
        "verify wrote to the home"
    );
    let j = serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| {
        panic!(
            "verify --json printed no JSON ({e}): {} / {}",
            stdout(&o),
            stderr(&o)
        )
    });
    (o.status.code(), j)
}

#[test]
fn a_clean_home_verifies_clean_on_either_engine() {
    for engine in ["redb", "journal"] {
        let dir = tempfile::tempdir().unwrap();
        let home = home_on(dir.path(), engine);
        let (code, j) = verify(&home);
        assert_eq!(code, Some(0), "{engine}: {j}");
        assert_eq!(j["clean"], true, "{engine}: {j}");
        assert_eq!(j["engine"], engine);
        assert_eq!(j["blocks"], 203);
        assert_eq!(j["block_store_height"], 203);
        assert_eq!(j["problems_total"], 0);
        let o = run(&["verify", "--home", home.to_str().unwrap()]);
        assert!(stdout(&o).contains("clean:"), "{}", stdout(&o));
    }
}

#[test]
fn a_zeroed_redb_page_is_reported_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let home = home_on(dir.path(), "redb");
    let file = home.join("blockstore.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let page = bytes.len() / 4096 / 2;
    bytes[page * 4096..(page + 1) * 4096].fill(0);
    std::fs::write(&file, &bytes).unwrap();
    let (code, j) = verify(&home);
    assert_eq!(code, Some(1), "{j}");
    assert_eq!(j["clean"], false);
    assert!(j["problems_total"].as_u64().unwrap() >= 1, "{j}");
    let o = run(&["verify", "--home", home.to_str().unwrap()]);
    assert!(
        stderr(&o).contains("is damaged") || stderr(&o).contains("damaged"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_flipped_segment_bit_is_reported_naming_the_segment() {
    let dir = tempfile::tempdir().unwrap();
    let home = home_on(dir.path(), "journal");
    let seg = home.join("journal/00000000000000000000.seg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[2000] ^= 0x10;
    std::fs::write(&seg, &bytes).unwrap();
    let (code, j) = verify(&home);
    assert_eq!(code, Some(1), "{j}");
    let detail = j["problems"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("00000000000000000000.seg"), "{j}");
    assert_eq!(j["problems"][0]["kind"], "Corrupt", "{j}");
}

#[test]
fn a_directory_without_a_home_exits_1_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "verify",
        "--home",
        dir.path().join("none").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no flushpoint home here"),
        "{}",
        stderr(&o)
    );
    assert!(
        !dir.path().join("none").exists(),
        "verify created the directory"
    );
}
