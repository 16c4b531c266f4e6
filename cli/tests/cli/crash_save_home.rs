//! `crash-test --save-flush-kill-home DIR` writes a new or empty directory only: an
//! existing home, a locked directory or any non-empty one is refused with exit 2 before the
//! test starts, and left byte for byte as it was.

use crate::cli_support::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `dir` (recursively) and its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                files.insert(e.path(), std::fs::read(e.path()).unwrap());
            }
        }
    }
    files
}

/// A short crash-test saving into `save`; its work directory is `work`.
fn crash_test(save: &Path, work: &Path) -> std::process::Output {
    run(&[
        "crash-test",
        "--kills",
        "3",
        "--seed",
        "2",
        "--blocks",
        "50",
        "--consensus-blocks",
        "2",
        "--flush-every",
        "10",
        "--work-dir",
        work.to_str().unwrap(),
        "--save-flush-kill-home",
        save.to_str().unwrap(),
    ])
}

/// `crash-test` into `save` is refused with exit 2, one line containing `why`, writes no
/// work directory and leaves `save` unchanged.
fn assert_refused(save: &Path, why: &str) {
    let before = snapshot(save);
    let work = save.with_extension("work");
    let o = crash_test(save, &work);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}{e}", stdout(&o));
    assert_eq!(e.trim().lines().count(), 1, "not one line: {e:?}");
    assert!(e.contains(why), "{e}");
    assert!(e.contains("--save-flush-kill-home"), "{e}");
    assert!(!work.exists(), "the refused run created its work directory");
    assert_eq!(snapshot(save), before, "{} changed", save.display());
}

#[test]
fn an_existing_home_is_refused_and_left_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["redb", "journal"] {
        let home = dir.path().join(engine);
        let o = run(&[
            "sync",
            "--home",
            home.to_str().unwrap(),
            "--blocks",
            "120",
            "--engine",
            engine,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_refused(&home, "is a flushpoint home");
        // Open (locked) by a process: still refused, still unchanged.
        let held = flushpoint::Home::open(&home).unwrap();
        assert_refused(&home, "is a flushpoint home");
        drop(held);
        let o = run(&["inspect", "--home", home.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(j["heights"]["state"], 140, "{j}");
    }
}

#[test]
fn a_locked_or_non_empty_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("todo.txt"), "keep me\n").unwrap();
    assert_refused(&other, "not empty");

    // A directory whose LOCK another process holds (a home being created, say).
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    let lock = std::fs::File::create(locked.join("LOCK")).unwrap();
    lock.try_lock().unwrap();
    assert_refused(&locked, "is locked");
    drop(lock);

    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = crash_test(&file, &dir.path().join("w"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn a_new_or_empty_directory_receives_the_killed_home() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for save in [dir.path().join("new/nested"), empty] {
        let o = crash_test(&save, &dir.path().join("work"));
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        assert!(
            save.join("FORMAT").exists(),
            "nothing saved in {}",
            save.display()
        );
        let o = run(&["inspect", "--home", save.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}
