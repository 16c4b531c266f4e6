//! One engine per journal directory: a second `JournalEngine::open` of a directory that is
//! open is refused with `ErrorKind::Locked` (redb's lock on the index file), and succeeds
//! once the first engine and its keyspaces are dropped.

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
