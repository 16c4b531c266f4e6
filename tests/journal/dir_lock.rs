//! One engine per journal directory, however it is reached: two homes whose `journal/` is
//! the same directory (a symlink) cannot run at once. The second `JournalEngine::open` is
//! refused with `Error::JournalLocked` (kind `Locked`) naming its path, while the first
//! keeps working; once the first is dropped the second opens.

use std::sync::Arc;

use bytes::Bytes;
use flushpoint::fs::StdFs;
use flushpoint::journal::{JournalEngine, JournalOptions};
use flushpoint::{Batch, Db, Durability, Error, ErrorKind};

fn put(engine: &JournalEngine, key: &'static [u8]) {
    let ks = engine.keyspace("ks").unwrap();
    let mut b = Batch::new();
    b.put(Bytes::from_static(key), Bytes::from_static(b"v"));
    ks.write(&b, Durability::Synced).unwrap();
}

#[test]
fn a_journal_reached_through_a_symlink_is_locked_by_the_engine_that_has_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&home_b).unwrap();
    let dir_a = home_a.join("journal");
    let dir_b = home_b.join("journal");
    let first = JournalEngine::open(Arc::new(StdFs), &dir_a, JournalOptions::default()).unwrap();
    std::os::unix::fs::symlink(&dir_a, &dir_b).unwrap();
    put(&first, b"k1");

    let err = JournalEngine::open(Arc::new(StdFs), &dir_b, JournalOptions::default()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Locked, "{err}");
    assert!(
        matches!(&err, Error::JournalLocked { dir } if *dir == dir_b),
        "names the journal directory: {err:?}"
    );

    put(&first, b"k2");
    let ks = first.keyspace("ks").unwrap();
    assert!(ks.get(b"k1").unwrap().is_some() && ks.get(b"k2").unwrap().is_some());
    drop(ks);
    drop(first);
    let second = JournalEngine::open(Arc::new(StdFs), &dir_b, JournalOptions::default()).unwrap();
    let ks = second.keyspace("ks").unwrap();
    assert!(ks.get(b"k2").unwrap().is_some());
}
