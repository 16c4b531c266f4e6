//! The unapplied units never hold much more than `overlay_bytes_max`: writers wait for the
//! background applier (or sync buffered units so that it can apply them). Checked with the
//! engine's own peak counter over a burst of synced and buffered units that outruns the
//! applier; the peak may pass the budget by at most the one unit that entered last.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::journal::{Applier, JournalEngine, JournalOptions};
use flushpoint::testing::SimFs;
use flushpoint::{Batch, Db, Durability};

/// Budget in this test. Why: 16 units of the size below; the burst writes 40× that.
const OVERLAY_BYTES: u64 = 64 * 1024;
/// Bytes of one unit's value.
const VALUE_BYTES: usize = 4096;
/// Units in the burst.
const UNITS: u64 = 640;

#[test]
fn writers_wait_for_the_applier_at_the_overlay_budget() {
    let fs = SimFs::new();
    let options = JournalOptions::default()
        .with_overlay_bytes_max(OVERLAY_BYTES)
        .with_applier(Applier::Background);
    let engine = JournalEngine::open(Arc::new(fs), Path::new("/j"), options).unwrap();
    let db = engine.keyspace("ks").unwrap();
    for i in 0..UNITS {
        let mut b = Batch::new();
        b.put(
            Bytes::from(i.to_be_bytes().to_vec()),
            Bytes::from(vec![i as u8; VALUE_BYTES]),
        );
        // Every fourth unit synced: the buffered ones must be synced to be applied.
        let durability = if i % 4 == 3 {
            Durability::Synced
        } else {
            Durability::Buffered
        };
        db.write(&b, durability).unwrap();
    }
    let counts = engine.counts();
    println!("{counts:?}");
    let unit_bytes = (8 + VALUE_BYTES) as u64;
    assert!(
        counts.overlay_bytes_peak <= OVERLAY_BYTES + unit_bytes,
        "peak {} over budget {OVERLAY_BYTES} + one unit {unit_bytes}",
        counts.overlay_bytes_peak
    );
    assert!(counts.overlay_waits > 0, "the burst reached the budget");
    // Every unit readable, from the overlay or the index.
    for i in (0..UNITS).step_by(37) {
        assert_eq!(
            db.get(&i.to_be_bytes()).unwrap().unwrap().len(),
            VALUE_BYTES
        );
    }
}
