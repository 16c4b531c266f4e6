//! redb's verdict that a file's bytes are damaged — `Corrupted`, or the `InvalidData` error
//! of a file that is not a redb database — is `ErrorKind::Corrupt`, not `Io`: a restart
//! does not repair it (the tool then says to restore the home, not to rerun).

use flushpoint::{Error, ErrorKind, RedbDb, RedbOptions};

#[test]
fn a_redb_file_whose_magic_is_overwritten_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.redb");
    drop(RedbDb::open(&path, "app", &RedbOptions::default()).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..16].fill(0xff);
    std::fs::write(&path, bytes).unwrap();
    let Err(e) = RedbDb::open(&path, "app", &RedbOptions::default()) else {
        panic!("a file that is not a redb database opened");
    };
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");
}

#[test]
fn redb_corruption_verdicts_are_corrupt_and_os_errors_stay_io() {
    let corrupted = redb::CommitError::Storage(redb::StorageError::Corrupted("page".into()));
    assert_eq!(
        Error::storage("app", "commit", corrupted).kind(),
        ErrorKind::Corrupt
    );
    let not_a_db = redb::DatabaseError::Storage(redb::StorageError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "Not a redb database: magic number mismatch",
    )));
    assert_eq!(
        Error::storage("app", "open", not_a_db).kind(),
        ErrorKind::Corrupt
    );
    // The device's own errors (an errno, whatever kind it maps to) are I/O failures.
    for errno in [libc::EIO, libc::EBADMSG] {
        let os = redb::TransactionError::Storage(redb::StorageError::Io(
            std::io::Error::from_raw_os_error(errno),
        ));
        assert_eq!(
            Error::storage("app", "read", os).kind(),
            ErrorKind::Io,
            "errno {errno}"
        );
    }
}
