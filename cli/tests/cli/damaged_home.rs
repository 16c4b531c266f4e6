//! A damaged home's one-line message says what to do about damage — restore from a backup
//! or sync a new home — and never that rerunning repairs it: the start-up handshake
//! repairs the shapes a crash leaves, not damaged bytes.

use crate::cli_support::*;

use std::path::Path;

/// Overwrites `len` bytes of `file` at `offset` (from the end when negative).
fn damage(file: &Path, offset: i64, len: usize) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    let at = if offset < 0 {
        SeekFrom::End(offset)
    } else {
        SeekFrom::Start(offset as u64)
    };
    f.seek(at).unwrap();
    f.write_all(&vec![0xff; len]).unwrap();
}

/// `inspect` and `sync` on `home` fail with one line containing every text in `says`,
/// that advises no rerun.
fn assert_damage_advice(home: &Path, says: &[&str]) {
    let h = home.to_str().unwrap();
    for args in [
        vec!["inspect", "--home", h],
        vec!["sync", "--home", h, "--blocks", "400"],
    ] {
        let o = run(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "not one line: {e:?}");
        assert!(!e.contains("rerun the command"), "{args:?}: {e}");
        assert!(!e.contains("repairs the home"), "{args:?}: {e}");
        assert!(e.contains("backup"), "{args:?}: {e}");
        for s in says {
            assert!(e.contains(s), "{args:?}: {e} does not say {s:?}");
        }
    }
}

#[test]
fn a_redb_file_that_is_not_a_database_is_named_damaged() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["blockstore.redb", "state.redb", "app.redb"] {
        let home = dir.path().join(file);
        sync_json_on(&home, Some("redb"), 30, 2, 1);
        damage(&home.join(file), 0, 16);
        let path = home.join(file);
        assert_damage_advice(&home, &[path.to_str().unwrap(), "is damaged"]);
    }
}

#[test]
fn a_home_whose_format_does_not_match_its_files_says_restore() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    sync_json_on(&home, Some("redb"), 30, 2, 1);
    let format = std::fs::read_to_string(home.join("FORMAT")).unwrap();
    std::fs::write(home.join("FORMAT"), format + "engine journal\n").unwrap();
    assert_damage_advice(&home, &[]);
}

#[test]
fn a_damaged_journal_file_is_named_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let o = run(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--blocks",
        "300",
        "--engine",
        "journal",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    damage(&home.join("journal/index.redb"), 0, 16);
    assert_damage_advice(&home, &["is damaged", home.to_str().unwrap()]);
}
