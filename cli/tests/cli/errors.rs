//! Each user error is one line on stderr that says what to do, with exit code 2 for usage
//! and 1 otherwise, and leaves the home as it was.

use crate::cli_support::*;

fn one_line(o: &std::process::Output) -> String {
    let e = stderr(o);
    assert_eq!(e.trim().lines().count(), 1, "not one line: {e:?}");
    e
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    let o = run(&["sync", "--profile", "gigantic"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(one_line(&o).contains("--help"));
    let o = run(&[
        "sync",
        "--blocks",
        "0",
        "--home",
        "/nonexistent/never-created",
    ]);
    assert_eq!(o.status.code(), Some(2));
    one_line(&o);
}

#[test]
fn a_cache_out_of_range_is_refused_before_the_home_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("h");
    let sync = |cache: &str, more: &[&str]| {
        let head = [
            "sync",
            "--home",
            home.to_str().unwrap(),
            "--cache-mib",
            cache,
        ];
        run(&[&head[..], more].concat())
    };
    for bad in ["0", "2097152"] {
        let o = sync(bad, &["--blocks", "3"]);
        assert_eq!(o.status.code(), Some(2), "--cache-mib {bad}");
        assert!(one_line(&o).contains("--cache-mib"));
        assert!(!home.exists(), "--cache-mib {bad} created the home");
    }
    // In range, on a journal home: the sync runs.
    let o = sync("16", &["--blocks", "30", "--engine", "journal"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn missing_home_says_how_to_create_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "inspect",
        "--home",
        dir.path().join("nope").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(one_line(&o).contains("flushpoint sync"));
    assert!(!dir.path().join("nope").exists(), "inspect created a home");
}

#[test]
fn locked_home_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    sync_json(&home, 5, 1, 1);
    let held = flushpoint::Home::open(&home).unwrap();
    for args in [
        vec!["inspect", "--home", home.to_str().unwrap()],
        vec!["sync", "--home", home.to_str().unwrap(), "--blocks", "5"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1));
        assert!(one_line(&o).contains("already open"), "{}", stderr(&o));
    }
    drop(held);
    assert!(
        run(&["inspect", "--home", home.to_str().unwrap()])
            .status
            .success()
    );
}

#[test]
fn other_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("FORMAT"), "flushpoint home format 99\n").unwrap();
    let o = run(&["sync", "--home", home.to_str().unwrap(), "--blocks", "3"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(one_line(&o).contains("format version 99"));
    assert!(
        !home.join("blockstore.redb").exists(),
        "a database was created"
    );
}

#[test]
fn unwritable_home_is_one_line() {
    // /proc refuses new directories even for root.
    let o = run(&["sync", "--home", "/proc/flushpoint-home", "--blocks", "3"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(one_line(&o).contains("/proc/flushpoint-home"));
}
