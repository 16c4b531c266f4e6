//! One engine per journal directory: a second `JournalEngine::open` of a directory that is
//! open is refused with `ErrorKind::Locked` (the engine's lock on `journal/LOCK`), and succeeds
//! once the first engine and its keyspaces are dropped — even while a descriptor that shares
//! its lock file lives on.

use std::sync::Arc;

use bytes::Bytes;
use flushpoint::fs::StdFs;
use flushpoint::journal::{JournalEngine, JournalOptions};
use flushpoint::{Batch, Db, Durability, ErrorKind};

#[test]
fn a_second_open_of_an_open_journal_is_refused_as_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let first = JournalEngine::open(Arc::new(StdFs), &dir, JournalOptions::default()).unwrap();
    let ks = first.keyspace("ks").unwrap();
    let mut b = Batch::new();
    b.put(Bytes::from_static(b"k"), Bytes::from_static(b"v"));
    ks.write(&b, Durability::Synced).unwrap();

    let err = JournalEngine::open(Arc::new(StdFs), &dir, JournalOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");

    drop(ks);
    drop(first);
    let again = JournalEngine::open(Arc::new(StdFs), &dir, JournalOptions::default()).unwrap();
    let ks = again.keyspace("ks").unwrap();
    assert_eq!(ks.get(b"k").unwrap(), Some(Bytes::from_static(b"v")));
}

/// The descriptor of this process's open file at `path` (Linux: `/proc/self/fd`).
fn fd_of(path: &std::path::Path) -> Option<std::os::fd::RawFd> {
    let want = std::fs::canonicalize(path).ok()?;
    std::fs::read_dir("/proc/self/fd").ok()?.find_map(|e| {
        let e = e.ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        (target == want).then(|| e.file_name().to_str()?.parse().ok())?
    })
}

/// The engine's drop releases the directory's lock even while another descriptor shares
/// its open file description — what a child process spawned by another thread holds
/// between its fork and its exec. Closing the file alone would leave the lock held.
#[test]
fn a_dropped_engine_releases_its_lock_while_a_shared_descriptor_lives_on() {
    use std::os::fd::FromRawFd;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("journal");
    let engine = JournalEngine::open(Arc::new(StdFs), &dir, JournalOptions::default()).unwrap();
    let fd = fd_of(&dir.join("LOCK")).expect("the engine holds journal/LOCK open");
    // A second descriptor of the same open file description (`dup`), as a fork makes.
    // SAFETY: `fd` is open for the engine's life; the `File` made from it is never
    // dropped (forgotten), so the engine's own close stays the only one.
    let borrowed = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) });
    let shared = borrowed.try_clone().unwrap();

    drop(engine);
    let again = JournalEngine::open(Arc::new(StdFs), &dir, JournalOptions::default());
    assert!(
        again.is_ok(),
        "the lock outlived the engine: {:?}",
        again.err()
    );
    drop(shared);
}
