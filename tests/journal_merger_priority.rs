//! The merger thread runs below the thread that opened the engine
//! (`JournalOptions::merger_nice_increment`, default `MERGER_NICE_INCREMENT`), read back from
//! the kernel's own account of each thread (`/proc/self/task/<tid>/stat`); a bad increment is
//! refused before anything is created. Alone in its test binary: it looks for the one thread
//! named `journal-merger` in this process.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::fs::StdFs;
use flushpoint::journal::{
    JournalEngine, JournalOptions, KeyspaceOptions, MERGER_NICE_INCREMENT,
    MERGER_NICE_INCREMENT_MAX,
};
use flushpoint::{Batch, Db, Durability, ErrorKind};

/// The nice value in the `stat` file at `path`: field 19, counted after the command
/// name's closing parenthesis (a name may hold spaces).
fn nice_in(path: &str) -> Option<i32> {
    let stat = std::fs::read_to_string(path).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields 3.. follow the name.
    after_name.split_whitespace().nth(19 - 3)?.parse().ok()
}

/// The nice value of thread `tid` of this process.
fn nice_of(tid: &str) -> Option<i32> {
    nice_in(&format!("/proc/self/task/{tid}/stat"))
}

/// The ids of this process's threads named `name`.
fn threads_named(name: &str) -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("read /proc/self/task")
        .filter_map(|e| {
            let tid = e.ok()?.file_name().into_string().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
            (comm.trim_end() == name).then_some(tid)
        })
        .collect()
}

/// This thread's nice value.
fn own_nice() -> i32 {
    nice_in("/proc/thread-self/stat").expect("this thread's nice value")
}

/// Opens a journal in `dir` with an app keyspace indexed by runs and writes synced units
/// until the background applier has written runs and started the merger; returns the
/// engine (dropping it, with the keyspace handle dropped here, closes it) and the merger's
/// nice value once it has set it to `want` (or the last value seen after 20 s).
fn merger_nice(dir: &Path, options: JournalOptions, want: i32) -> (JournalEngine, i32) {
    let engine = JournalEngine::open(Arc::new(StdFs), dir, options).expect("open");
    let app = engine
        .keyspace_with("app", KeyspaceOptions::indexed_by_runs())
        .expect("keyspace");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0u32;
    let mut seen = None;
    while Instant::now() < deadline {
        let mut b = Batch::new();
        for i in 0..50u32 {
            b.put(
                format!("acct/{:08x}", i.wrapping_mul(0x9e37_79b9)).into_bytes(),
                format!("round {round}").into_bytes(),
            );
        }
        app.write(&b, Durability::Synced).expect("write");
        round += 1;
        if let [tid] = threads_named("journal-merger").as_slice() {
            seen = nice_of(tid);
            if seen == Some(want) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    (engine, seen.expect("the merger thread started within 20 s"))
}

#[test]
fn the_merger_runs_below_the_opening_thread_and_a_bad_increment_is_refused() {
    let base = own_nice();
    // At 19 nothing can run lower, and a lowering would pass unseen (`scripts/mutants.sh`
    // ran its tests under `nice -n 19`, and every mutant of the lowering survived).
    assert!(
        base < 19,
        "this test runs at nice {base}: the merger's lower priority cannot be seen below it; \
         run it at a nice value under 19"
    );
    let tmp = tempfile::tempdir().expect("tempdir");

    // Refused before anything is made: not even the directory.
    let bad = tmp.path().join("bad");
    let err = JournalEngine::open(
        Arc::new(StdFs),
        &bad,
        JournalOptions::default().with_merger_nice_increment(MERGER_NICE_INCREMENT_MAX + 1),
    )
    .expect_err("an increment past the nice range");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(!bad.exists(), "nothing created for a refused option");
    // The largest increment is taken (the kernel caps the value at 19).
    let max = JournalEngine::open(
        Arc::new(StdFs),
        &tmp.path().join("max"),
        JournalOptions::default().with_merger_nice_increment(MERGER_NICE_INCREMENT_MAX),
    )
    .expect("the largest increment is valid");
    drop(max);

    // A chosen increment: the opening thread's nice value plus it (1 at nice 18).
    let increment = u8::try_from((19 - base).min(3)).expect("1 to 3");
    let want = base + i32::from(increment);
    let (engine, nice) = merger_nice(
        &tmp.path().join("three"),
        JournalOptions::default().with_merger_nice_increment(increment),
        want,
    );
    assert_eq!(
        nice, want,
        "merger nice with increment {increment} (opening thread at {base})"
    );
    drop(engine);
    assert!(
        threads_named("journal-merger").is_empty(),
        "the close ends the merger"
    );

    // The default: the lowest priority there is.
    let want = (base + i32::from(MERGER_NICE_INCREMENT)).min(19);
    let (engine, nice) = merger_nice(&tmp.path().join("default"), JournalOptions::default(), want);
    assert_eq!(
        nice, want,
        "merger nice by default (opening thread at {base})"
    );
    drop(engine);

    // 0: the merger keeps the opening thread's priority.
    let (engine, nice) = merger_nice(
        &tmp.path().join("zero"),
        JournalOptions::default().with_merger_nice_increment(0),
        base,
    );
    assert_eq!(nice, base, "merger nice with increment 0");
    drop(engine);
    assert_eq!(
        own_nice(),
        base,
        "the opening thread's own priority is untouched"
    );
}
