//! A database file is created atomically: a crash during creation leaves at most a
//! `<file>.creating` leftover, which the next open deletes; the real name only ever holds a
//! complete database.

use flushpoint::{Batch, Db, Durability, RedbDb, RedbOptions};

#[test]
fn leftover_half_created_file_is_discarded_and_the_real_name_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.redb");
    let leftover = dir.path().join("state.redb.creating");
    // What a power cut in the middle of creation can leave: a torn header redb refuses.
    std::fs::write(&leftover, vec![0xAB; 4096]).unwrap();
    assert!(
        RedbDb::open(&leftover, "probe", &RedbOptions::default()).is_err(),
        "the leftover must be a file redb refuses, or this test proves nothing"
    );
    std::fs::write(&leftover, vec![0xAB; 4096]).unwrap();
    let db = RedbDb::open(&path, "state", &RedbOptions::default()).unwrap();
    assert!(!leftover.exists(), "the leftover is removed");
    let mut b = Batch::new();
    b.put(&b"k"[..], &b"v"[..]);
    db.write(&b, Durability::Synced).unwrap();
    drop(db);
    let db = RedbDb::open(&path, "state", &RedbOptions::default()).unwrap();
    assert_eq!(db.get(b"k").unwrap().unwrap(), &b"v"[..]);
}

#[test]
fn creation_never_exposes_the_real_name_before_the_database_is_complete() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.redb");
    let db = RedbDb::open(&path, "app", &RedbOptions::default()).unwrap();
    drop(db);
    // The file under the real name is a complete database from its first byte: reopening
    // read-write succeeds and only the real name is left in the directory.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["app.redb".to_string()]);
    RedbDb::open(&path, "app", &RedbOptions::default()).unwrap();
}
