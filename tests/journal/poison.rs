//! A failed journal write or sync poisons the engine: the call that saw it returns the I/O
//! error, every later call on every keyspace returns `Poisoned` carrying that first cause,
//! and no sync is issued again (never retried as if it had worked). The failure is a power
//! cut on `SimFs` at the unit's `sync_data` — counted first, so the fault is known to fire.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::journal::{Applier, JournalEngine, JournalOptions};
use flushpoint::testing::{SimFs, SimOp};
use flushpoint::{Batch, Db, Durability, ErrorKind};

fn batch(k: &str) -> Batch {
    let mut b = Batch::new();
    b.put(Bytes::from(k.to_string()), Bytes::from_static(b"v"));
    b
}

#[test]
fn a_failed_sync_poisons_every_keyspace_and_is_never_retried() {
    for applier in [Applier::Inline, Applier::Background] {
        let fs = SimFs::new();
        let options = JournalOptions::default().with_applier(applier);
        let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new("/j"), options).unwrap();
        let a = engine.keyspace("a").unwrap();
        let b = engine.keyspace("b").unwrap();
        a.write(&batch("first"), Durability::Synced).unwrap();
        // The next synced write's ops: its append, then its sync — cut the sync.
        fs.set_cut_at(Some(fs.ops() + 2));
        let err = a.write(&batch("second"), Durability::Synced).unwrap_err();
        assert!(fs.is_dead(), "the fault fired");
        let log = fs.stats().log;
        assert_eq!(
            log.last().map(|(op, _)| *op),
            Some(SimOp::SyncData),
            "{applier:?}"
        );
        assert_eq!(err.kind(), ErrorKind::Io, "{err}");
        let syncs = fs.stats().counts.get(&SimOp::SyncData).copied();

        for result in [
            b.write(&batch("x"), Durability::Buffered).map(|_| ()),
            a.write(&batch("y"), Durability::Synced).map(|_| ()),
            engine.commit(&[("a", &batch("z"))], Durability::Synced),
            a.get(b"first").map(|_| ()),
            engine.checkpoint(),
        ] {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Poisoned, "{applier:?}: {e}");
            assert!(
                e.to_string().contains("fsync segment"),
                "first cause kept: {e}"
            );
        }
        assert_eq!(
            fs.stats().counts.get(&SimOp::SyncData).copied(),
            syncs,
            "no sync after the failed one"
        );
    }
}
