//! Property: every error has a kind an embedder can match on without reading its message,
//! keeps its source (`std::error::Error::source`), and a poisoned handle reports the first
//! failure's kind — a full disk stays `DiskFull` behind every later `Poisoned`.

use std::error::Error as StdError;
use std::sync::Arc;

use flushpoint::{
    Batch, CorruptReason, Db, DbWrapper, Durability, Error, ErrorKind, Heights, HoldingDb,
    MemoryDb, Result,
};

const ENOSPC: i32 = 28;
const EDQUOT: i32 = 122;
const EIO: i32 = 5;

fn io_source(e: &Error) -> Option<&std::io::Error> {
    let mut cur: Option<&(dyn StdError + 'static)> = e.source();
    while let Some(s) = cur {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        cur = s.source();
    }
    None
}

#[test]
fn a_full_disk_is_disk_full_and_keeps_its_io_error_as_source() {
    for errno in [ENOSPC, EDQUOT] {
        let e = Error::storage("app", "write", std::io::Error::from_raw_os_error(errno));
        assert_eq!(e.kind(), ErrorKind::DiskFull, "errno {errno}");
        assert_eq!(io_source(&e).and_then(|io| io.raw_os_error()), Some(errno));
    }
    // The same inside redb's error types (they carry the I/O error as a variant).
    let redb_err = redb::CommitError::Storage(redb::StorageError::Io(
        std::io::Error::from_raw_os_error(ENOSPC),
    ));
    let e = Error::storage("state", "commit", redb_err);
    assert_eq!(e.kind(), ErrorKind::DiskFull);
    assert!(e.source().is_some(), "the redb error is kept");
    // Other I/O errors are `Io`, not `DiskFull`: the classification can say no.
    let e = Error::storage("app", "write", std::io::Error::from_raw_os_error(EIO));
    assert_eq!(e.kind(), ErrorKind::Io);
    let e = Error::storage("app", "write", "no I/O error at all");
    assert_eq!(e.kind(), ErrorKind::Io);
}

/// A database whose every write fails with `errno`.
#[derive(Debug)]
struct FailingWrites {
    inner: MemoryDb,
    errno: i32,
}

impl DbWrapper for FailingWrites {
    type Inner = MemoryDb;
    fn inner(this: &Self) -> &MemoryDb {
        &this.inner
    }
    fn write(this: &Self, _batch: &Batch, _durability: Durability) -> Result<()> {
        Err(Error::storage(
            this.name(),
            "fsync",
            std::io::Error::from_raw_os_error(this.errno),
        ))
    }
}

#[test]
fn a_poisoned_handle_reports_the_first_failures_kind() {
    for (errno, kind) in [(ENOSPC, ErrorKind::DiskFull), (EIO, ErrorKind::Io)] {
        let db = HoldingDb::new(Arc::new(FailingWrites {
            inner: MemoryDb::new("app"),
            errno,
        }));
        db.hold().unwrap();
        let mut b = Batch::new();
        b.put(&b"k"[..], &b"v"[..]);
        db.write(&b, Durability::Synced).unwrap();
        let first = db.write_held().expect_err("the write fails");
        assert_eq!(first.kind(), kind);
        let later = db.get(b"k").expect_err("poisoned");
        assert_eq!(later.kind(), ErrorKind::Poisoned);
        match &later {
            Error::Poisoned { db, cause } => {
                assert_eq!(db, "app");
                assert_eq!(cause.kind, kind, "errno {errno}: the first failure's kind");
                assert!(cause.message.contains("fsync"), "{cause}");
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
        let source = later.source().expect("Poisoned has a source");
        assert_eq!(source.to_string(), first.to_string());
    }
}

#[test]
fn every_variant_has_its_kind() {
    let heights = Heights {
        block_store_height: 3,
        state_height: 1,
        app_height: 0,
    };
    let cases: Vec<(Error, ErrorKind)> = vec![
        (
            Error::Corrupt {
                db: "state".into(),
                key: vec![0x11],
                height: None,
                reason: CorruptReason::Trailing(1),
            },
            ErrorKind::Corrupt,
        ),
        (
            Error::NonContiguous {
                expected: 2,
                got: 4,
            },
            ErrorKind::InvalidInput,
        ),
        (
            Error::PartSetMismatch {
                height: 2,
                offset: 0,
                block_size: 10,
            },
            ErrorKind::InvalidInput,
        ),
        (Error::InvalidInput("x".into()), ErrorKind::InvalidInput),
        (
            Error::NotFound {
                db: "block store".into(),
                what: "block 9".into(),
            },
            ErrorKind::NotFound,
        ),
        (
            Error::HomeLocked {
                path: "/tmp/h".into(),
            },
            ErrorKind::Locked,
        ),
        (
            Error::HomeVersion {
                path: "/tmp/h".into(),
                found: 9,
                expected: 1,
            },
            ErrorKind::Incompatible,
        ),
        (
            Error::HomeEngine {
                path: "/tmp/h".into(),
                recorded: flushpoint::HomeEngine::Journal,
                requested: flushpoint::HomeEngine::Redb,
            },
            ErrorKind::Incompatible,
        ),
        (
            Error::Inconsistent {
                heights,
                record: "absent".into(),
                reason: "gap".into(),
            },
            ErrorKind::Inconsistent,
        ),
        (
            Error::Rollback("below the app".into()),
            ErrorKind::Inconsistent,
        ),
        (
            Error::AppCannotRollBack {
                to: 1,
                app_height: 30,
                lowest: Some(14),
            },
            ErrorKind::Inconsistent,
        ),
        (
            Error::RollbackRefused {
                to: 1,
                heights,
                reason: flushpoint::RollbackRefusal::BelowBase { base: 5 },
            },
            ErrorKind::Inconsistent,
        ),
        (
            Error::RollbackRefused {
                to: 1,
                heights,
                reason: flushpoint::RollbackRefusal::OtherInProgress { in_progress: 2 },
            },
            ErrorKind::Interrupted,
        ),
        (
            Error::RollbackInterrupted {
                path: "/tmp/h".into(),
                to: 1,
                block_store_height: 3,
                state_height: 3,
                step: "app",
            },
            ErrorKind::Interrupted,
        ),
        (
            Error::NotYetDurable { what: "the state" },
            ErrorKind::NotYetDurable,
        ),
        (
            Error::IncompletePartSet {
                height: 2,
                have: 1,
                total: 3,
            },
            ErrorKind::InvalidInput,
        ),
        (
            Error::InvalidBlock {
                height: 2,
                reason: "data hash does not match the transactions".into(),
            },
            ErrorKind::InvalidInput,
        ),
        (
            Error::AppHashMismatch {
                height: 2,
                expected: "aa".into(),
                got: "bb".into(),
            },
            ErrorKind::Inconsistent,
        ),
        (
            Error::GenesisMismatch {
                stored: "aa".into(),
                given: "bb".into(),
            },
            ErrorKind::Incompatible,
        ),
        (
            Error::Pruned {
                db: "state".into(),
                what: "results",
                height: 3,
                base: 10,
            },
            ErrorKind::NotFound,
        ),
        (
            Error::InvalidRetainHeight {
                db: "state".into(),
                retain_height: 0,
                base: 0,
                height: 9,
            },
            ErrorKind::InvalidInput,
        ),
        (
            Error::Contract {
                what: "height returned by App::commit",
                expected: 3,
                found: 4,
            },
            ErrorKind::Contract,
        ),
        (
            Error::Home {
                path: "/tmp/h".into(),
                op: "write FORMAT",
                source: std::io::Error::from_raw_os_error(ENOSPC),
            },
            ErrorKind::DiskFull,
        ),
    ];
    for (e, kind) in &cases {
        assert_eq!(e.kind(), *kind, "{e}");
    }
    // A locked home, for real: the kind, not the message, says so.
    let dir = tempfile::tempdir().unwrap();
    let _home = flushpoint::Home::open(dir.path()).unwrap();
    let e = flushpoint::Home::open(dir.path()).expect_err("locked");
    assert_eq!(e.kind(), ErrorKind::Locked);
}
