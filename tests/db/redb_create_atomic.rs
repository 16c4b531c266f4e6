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

/// The same property on the simulated file system, cut at every operation of a creation:
/// the real name is absent or names a database redb opens, and the next open completes the
/// creation and leaves no leftover.
#[test]
fn creation_cut_at_every_file_system_op_never_names_a_half_created_file() {
    use flushpoint::fs::FileSystem;
    use flushpoint::testing::{DirFate, FileFate, SimFs};
    use std::path::Path;
    use std::sync::Arc;
    let path = Path::new("/db/state.redb");
    let open = |fs: &SimFs| RedbDb::open_on(Arc::new(fs.clone()), path, "state", &options());
    let setup = || {
        let fs = SimFs::new();
        fs.create_dir_all(Path::new("/db")).unwrap();
        fs.sync_dir(Path::new("/")).unwrap();
        fs
    };
    let full = setup();
    let before = full.ops();
    let db = open(&full).unwrap();
    // The ops of the open itself; closing (redb's shutdown writes) comes after.
    let total = full.ops() - before;
    drop(db);
    assert!(
        total > 5,
        "a creation is several file-system ops, got {total}"
    );
    let mut images = 0;
    for k in 1..=total {
        let fs = setup();
        fs.set_cut_at(Some(before + k));
        assert!(open(&fs).is_err(), "cut {k} must interrupt the creation");
        for d in [DirFate::DropAll, DirFate::KeepAll, DirFate::Prefix(1)] {
            for f in [FileFate::DropAll, FileFate::KeepAll, FileFate::Random(k)] {
                let img = fs.crash_image(d, f);
                images += 1;
                if img.exists(path).unwrap() {
                    drop(open(&img).unwrap_or_else(|e| panic!("cut {k} {d:?} {f:?}: {e}")));
                }
                let db = open(&img).unwrap_or_else(|e| panic!("cut {k} {d:?} {f:?}: {e}"));
                drop(db);
                assert_eq!(
                    img.list(Path::new("/db")),
                    ["state.redb"],
                    "cut {k} {d:?} {f:?}"
                );
            }
        }
    }
    println!("redb_create_atomic: {total} cuts, {images} crash images");
}

fn options() -> RedbOptions {
    RedbOptions::default()
}
