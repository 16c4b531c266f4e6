//! A synced unit costs exactly one `sync_data`, on its segment, and no other journal sync:
//! a one-keyspace write and a three-keyspace commit alike. A buffered unit costs none. The
//! first unit of a segment adds one directory fsync (the segment's name). Counted twice,
//! independently: by `SimFs`'s own log of operations, per path, and by the engine's
//! counters. The index (`index.redb`) is the applier's: its non-durable commits sync only
//! when redb grows the file (seen here when a commit creates two new tables), counted apart
//! in `JournalCounts::index` and left out of the journal's count. The spare segment
//! (`spare.segment`, prepared segments: zeros written and synced ahead) is synced when it is
//! prepared — by the open of a new journal, by the background applier off any unit's path,
//! or by a roll itself when none is ready — and counted apart too.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flushpoint::journal::{Applier, JournalEngine, JournalOptions, segment_file_name};
use flushpoint::testing::{SimFs, SimOp};
use flushpoint::{Batch, Db, Durability};

const DIR: &str = "/j";

/// The sync operations (file and directory) SimFs logged since `from`, with their paths,
/// the index's and the spare segment's left out.
fn syncs_since(fs: &SimFs, from: usize) -> Vec<(SimOp, PathBuf)> {
    let index = Path::new(DIR).join(flushpoint::journal::INDEX_FILE);
    let spare = Path::new(DIR).join(flushpoint::journal::SPARE_SEGMENT_FILE);
    fs.stats().log[from..]
        .iter()
        .filter(|(op, _)| matches!(op, SimOp::SyncData | SimOp::SyncAll | SimOp::SyncDir))
        .filter(|(_, path)| *path != index && *path != spare)
        .cloned()
        .collect()
}

/// A roll's syncs, then its unit's: the directory (the new segment's name), then the
/// segment's `sync_data`.
fn roll_syncs(segment: &Path) -> Vec<(SimOp, PathBuf)> {
    vec![
        (SimOp::SyncDir, PathBuf::from(DIR)),
        (SimOp::SyncData, segment.to_path_buf()),
    ]
}

/// Segment 0 was made since log entry `at`: from the spare (renamed) when `prepared`,
/// else created.
fn assert_first_segment(fs: &SimFs, at: usize, prepared: bool, what: &str) {
    let seg0 = Path::new(DIR).join(segment_file_name(0));
    let expected = if prepared {
        SimOp::Rename
    } else {
        SimOp::Create
    };
    let ops = &fs.stats().log[at..];
    assert!(ops.contains(&(expected, seg0)), "{what}: {ops:?}");
}

fn batch(key: &str) -> Batch {
    let mut b = Batch::new();
    b.put(Bytes::from(key.to_string()), Bytes::from(vec![1u8; 100]));
    b
}

#[test]
fn one_synced_unit_is_one_sync_data_on_its_segment() {
    for applier in [Applier::Inline, Applier::Background] {
        let fs = SimFs::new();
        let options = JournalOptions::default().with_applier(applier);
        let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options).unwrap();
        let blocks = engine.keyspace("blocks").unwrap();
        let segment = Path::new(DIR).join(segment_file_name(0));

        // The open of a new journal prepared the spare (zeros written and synced), so the
        // first unit writes and syncs none.
        assert_eq!(engine.counts().segments_prepared, 1, "{applier:?}");
        let spare = Path::new(DIR).join(flushpoint::journal::SPARE_SEGMENT_FILE);
        assert!(
            fs.stats().log.contains(&(SimOp::SyncData, spare.clone())),
            "the open synced the spare ({applier:?})"
        );

        // The first unit creates segment 0 — that spare renamed in: one directory fsync,
        // then its one sync_data.
        let at = fs.stats().log.len();
        blocks.write(&batch("first"), Durability::Synced).unwrap();
        assert!(
            fs.stats().log[at..].contains(&(SimOp::Rename, segment.clone())),
            "segment 0 is the spare renamed in ({applier:?})"
        );
        let spare_ops: Vec<_> = fs.stats().log[at..]
            .iter()
            .filter(|(op, path)| *path == spare && *op != SimOp::Rename)
            .cloned()
            .collect();
        assert_eq!(
            spare_ops,
            vec![],
            "the first unit prepares no spare ({applier:?})"
        );
        assert_eq!(syncs_since(&fs, at), roll_syncs(&segment), "{applier:?}");

        // One keyspace, synced: exactly one sync_data (the applier's redb commits use
        // Durability::None: no sync; no checkpoint is due at the default sizes).
        let before = engine.counts();
        let at = fs.stats().log.len();
        blocks.write(&batch("k"), Durability::Synced).unwrap();
        assert_eq!(
            syncs_since(&fs, at),
            vec![(SimOp::SyncData, segment.clone())]
        );
        let after = engine.counts();
        assert_eq!(
            after.journal_sync_data_calls - before.journal_sync_data_calls,
            1
        );
        assert_eq!(after.dir_sync_calls, before.dir_sync_calls);

        // Three keyspaces in one commit: one unit, one sync_data.
        let at = fs.stats().log.len();
        let (b1, b2, b3) = (batch("block"), batch("state"), batch("app"));
        engine
            .commit(
                &[("blocks", &b1), ("state", &b2), ("app", &b3)],
                Durability::Synced,
            )
            .unwrap();
        assert_eq!(
            syncs_since(&fs, at),
            vec![(SimOp::SyncData, segment.clone())]
        );
        assert_eq!(engine.counts().units_written, 3);

        // Buffered: no sync at all.
        let at = fs.stats().log.len();
        blocks.write(&batch("b"), Durability::Buffered).unwrap();
        assert_eq!(syncs_since(&fs, at), vec![]);

        // A checkpoint is the index's durable commit: it syncs the index, not the journal
        // (the buffered unit's segment is synced first, so the checkpoint covers it).
        let before = engine.counts();
        engine.checkpoint().unwrap();
        let after = engine.counts();
        assert_eq!(after.checkpoints - before.checkpoints, 1);
        assert_eq!(
            after.journal_sync_data_calls - before.journal_sync_data_calls,
            1,
            "the buffered unit's sync"
        );
    }
}

/// A large unit (a flush point's) rolls into a segment created empty, leaving the spare;
/// small synced units (consensus blocks') append to that segment until one ends a run of
/// `SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL`, which rolls early into the spare, so its sync and
/// the next ones overwrite prepared zeros. A small unit among large ones (a heavy chain's
/// empty block) never takes the spare. When no spare is ready, the background writer does
/// not wait for one (it appends), while the inline writer prepares one, as at any roll.
/// Counted exactly, for both appliers (the background one never steps here: its batch delay
/// is an hour, so nothing races the writer for the spare); every unit reads back after a
/// reopen.
#[test]
fn a_large_unit_creates_its_segment_and_a_run_of_small_synced_ones_rolls_into_the_spare() {
    for applier in [Applier::Inline, Applier::Background] {
        let fs = SimFs::new();
        let options = JournalOptions::default()
            .with_applier(applier)
            .with_segment_bytes(64 * 1024)
            .with_prepared_units_below_bytes(8 * 1024)
            .with_apply_batch_delay(Duration::from_secs(3600))
            .with_checkpoint_interval(Duration::from_secs(3600));
        let open =
            || JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options.clone()).unwrap();
        let engine = open();
        let blocks = engine.keyspace("blocks").unwrap();
        let spare = Path::new(DIR).join(flushpoint::journal::SPARE_SEGMENT_FILE);
        let seg = |i: u64| Path::new(DIR).join(segment_file_name(i));
        let large = |key: &str, bytes: usize| {
            let mut b = Batch::new();
            b.put(Bytes::from(key.to_string()), Bytes::from(vec![7u8; bytes]));
            b
        };
        let ops_since = |at: usize| fs.stats().log[at..].to_vec();

        // The large unit: segment 0 created empty (no rename, the spare left as it was).
        let at = fs.stats().log.len();
        blocks
            .write(&large("large", 16 * 1024), Durability::Synced)
            .unwrap();
        let ops = ops_since(at);
        assert!(
            ops.contains(&(SimOp::Create, seg(0))),
            "{applier:?}: {ops:?}"
        );
        assert!(
            !ops.iter().any(|(_, p)| *p == spare),
            "{applier:?}: the spare is untouched: {ops:?}"
        );
        assert_eq!(
            engine.counts().segments_prepared,
            1,
            "the open's spare only"
        );
        assert_eq!(syncs_since(&fs, at), roll_syncs(&seg(0)), "{applier:?}");

        // Small synced units: segment 0 has room, and they grow it until one ends a run of
        // them; that one rolls into the ready spare first.
        let run = flushpoint::journal::SMALL_SYNCED_UNITS_BEFORE_EARLY_ROLL;
        assert!(run >= 2, "a run is more than one unit");
        let mut keys: Vec<String> = vec!["large".into()];
        for i in 1..run {
            let key = format!("small-{i}");
            let at = fs.stats().log.len();
            blocks.write(&batch(&key), Durability::Synced).unwrap();
            let ops = ops_since(at);
            assert!(
                !ops.iter()
                    .any(|(op, _)| matches!(op, SimOp::Create | SimOp::Rename)),
                "{applier:?}: small unit {i} of {run} appends: {ops:?}"
            );
            assert_eq!(syncs_since(&fs, at), vec![(SimOp::SyncData, seg(0))]);
            keys.push(key);
            if i == 1 {
                // A small buffered unit inside the run neither counts nor ends it.
                let at = fs.stats().log.len();
                blocks
                    .write(&batch("buffered"), Durability::Buffered)
                    .unwrap();
                assert!(
                    !ops_since(at)
                        .iter()
                        .any(|(op, _)| matches!(op, SimOp::Create | SimOp::Rename)),
                    "{applier:?}: a small buffered unit appends"
                );
                keys.push("buffered".into());
            }
        }
        let at = fs.stats().log.len();
        blocks.write(&batch("small"), Durability::Synced).unwrap();
        let ops = ops_since(at);
        assert!(
            ops.contains(&(SimOp::Rename, seg(1))),
            "{applier:?}: {ops:?}"
        );
        assert_eq!(syncs_since(&fs, at), roll_syncs(&seg(1)), "{applier:?}");
        keys.push("small".into());

        // The next small one appends over the zeros; a large buffered one too (it fits): no
        // roll (no segment created or renamed) and no truncation.
        let at = fs.stats().log.len();
        blocks.write(&batch("small2"), Durability::Synced).unwrap();
        blocks
            .write(&large("large2", 16 * 1024), Durability::Buffered)
            .unwrap();
        let ops = ops_since(at);
        assert!(
            !ops.iter()
                .any(|(op, _)| matches!(op, SimOp::Create | SimOp::Rename | SimOp::SetLen)),
            "{applier:?}: {ops:?}"
        );
        assert_eq!(syncs_since(&fs, at), vec![(SimOp::SyncData, seg(1))]);
        keys.extend(["small2".into(), "large2".into()]);

        // A large unit that does not fit: segment 2 created (segment 1, holding the
        // buffered unit, synced first).
        let at = fs.stats().log.len();
        blocks
            .write(&large("large3", 48 * 1024), Durability::Synced)
            .unwrap();
        let ops = ops_since(at);
        assert!(
            ops.contains(&(SimOp::Create, seg(2))),
            "{applier:?}: {ops:?}"
        );
        keys.push("large3".into());

        // A small unit among large ones (all but the last of a run, then a large one, then
        // one small): none rolls, inline or not, spare or none.
        for i in 1..run {
            let key = format!("lone-{i}");
            let at = fs.stats().log.len();
            blocks.write(&batch(&key), Durability::Synced).unwrap();
            assert_eq!(
                syncs_since(&fs, at),
                vec![(SimOp::SyncData, seg(2))],
                "{applier:?}: {key} appends"
            );
            keys.push(key);
        }
        // Without the large unit's reset of the run, the next small one would be the
        // run's last: inline it would prepare a spare and roll (the background writer has
        // none ready here, so only the inline applier can show it).
        blocks
            .write(&large("large4", 9 * 1024), Durability::Synced)
            .unwrap();
        let at = fs.stats().log.len();
        blocks.write(&batch("lone"), Durability::Synced).unwrap();
        let ops = ops_since(at);
        assert!(
            !ops.iter()
                .any(|(op, _)| matches!(op, SimOp::Create | SimOp::Rename)),
            "{applier:?}: a small unit after a large one appends: {ops:?}"
        );
        assert_eq!(syncs_since(&fs, at), vec![(SimOp::SyncData, seg(2))]);
        keys.extend(["large4".into(), "lone".into()]);

        // `lone` began a run of small synced ones; with no spare ready, the run's last unit
        // rolls inline only.
        for i in 2..run {
            let key = format!("small3-{i}");
            blocks.write(&batch(&key), Durability::Synced).unwrap();
            keys.push(key);
        }
        let at = fs.stats().log.len();
        blocks.write(&batch("small3"), Durability::Synced).unwrap();
        keys.push("small3".into());
        let ops = ops_since(at);
        match applier {
            // Inline: the writer prepares the spare, and rolls into it.
            Applier::Inline => {
                assert!(ops.contains(&(SimOp::Rename, seg(3))), "{ops:?}");
                assert_eq!(engine.counts().segments_prepared, 2);
            }
            // Background: the applier has not prepared one; the writer does not wait.
            _ => {
                assert!(
                    !ops.iter()
                        .any(|(op, _)| matches!(op, SimOp::Create | SimOp::Rename)),
                    "{ops:?}"
                );
                assert_eq!(syncs_since(&fs, at), vec![(SimOp::SyncData, seg(2))]);
                assert_eq!(engine.counts().segments_prepared, 1);
            }
        }
        drop(blocks);
        drop(engine);

        let engine = open();
        let blocks = engine.keyspace("blocks").unwrap();
        for key in &keys {
            assert!(
                blocks.get(key.as_bytes()).unwrap().is_some(),
                "{applier:?}: {key}"
            );
        }
    }
}

/// The bound is exclusive: a synced unit of exactly `prepared_units_below_bytes` is a large
/// one (its roll creates a segment); one byte more of bound and it takes the spare. The
/// unit's length is learnt from the engine's own count of journal bytes.
#[test]
fn a_unit_of_exactly_the_bound_is_not_prepared() {
    let unit_len = {
        let fs = SimFs::new();
        let engine =
            JournalEngine::open(Arc::new(fs), Path::new(DIR), JournalOptions::default()).unwrap();
        engine
            .keyspace("blocks")
            .unwrap()
            .write(&batch("k"), Durability::Synced)
            .unwrap();
        engine.counts().journal_bytes_written
    };
    for (bound, prepared) in [(unit_len, false), (unit_len + 1, true)] {
        let fs = SimFs::new();
        let options = JournalOptions::default()
            .with_applier(Applier::Inline)
            .with_prepared_units_below_bytes(bound);
        let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options).unwrap();
        let at = fs.stats().log.len();
        engine
            .keyspace("blocks")
            .unwrap()
            .write(&batch("k"), Durability::Synced)
            .unwrap();
        assert_eq!(engine.counts().journal_bytes_written, unit_len);
        assert_first_segment(
            &fs,
            at,
            prepared,
            &format!("bound {bound}, unit {unit_len}"),
        );
    }
}

/// The default bound sits where its rustdoc puts it: a consensus block's unit (~10–20 KB)
/// is a small one and takes the spare on the first roll; a heavy block's `save_block` unit
/// (~0.9 MB) is a large one and creates its segment. With the default options, only the
/// segment size shrunk so that both fit one segment.
#[test]
fn the_default_bound_prepares_a_consensus_blocks_unit_and_not_a_heavy_save() {
    assert_eq!(
        JournalOptions::default().prepared_units_below_bytes,
        flushpoint::journal::PREPARED_UNITS_BELOW_BYTES
    );
    for (value_bytes, prepared) in [(20 * 1000, true), (900 * 1000, false)] {
        let fs = SimFs::new();
        let options = JournalOptions::default()
            .with_applier(Applier::Inline)
            .with_segment_bytes(2 * 1024 * 1024);
        let engine = JournalEngine::open(Arc::new(fs.clone()), Path::new(DIR), options).unwrap();
        let mut b = Batch::new();
        b.put(
            Bytes::from_static(b"block"),
            Bytes::from(vec![3u8; value_bytes]),
        );
        let at = fs.stats().log.len();
        engine
            .keyspace("blocks")
            .unwrap()
            .write(&b, Durability::Synced)
            .unwrap();
        assert_first_segment(&fs, at, prepared, &format!("a {value_bytes}-byte unit"));
    }
}

/// Waits until the engine's counts satisfy `done` (the background applier's work),
/// failing after 10 s with `what`.
fn wait_for_counts(
    engine: &JournalEngine,
    what: &str,
    done: impl Fn(&flushpoint::journal::JournalCounts) -> bool,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done(&engine.counts()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {:?}",
            engine.counts()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A checkpoint (the index's durable commit) comes when its bytes are due, or with the
/// background applier when its interval is, or when forced; never otherwise: not after
/// every background step, and not by time inline (an inline engine checkpoints on its
/// caller's thread, by bytes or when asked). Found by mutation testing: each rule's
/// condition inverted passed every journal test.
#[test]
fn a_checkpoint_comes_by_bytes_by_interval_in_the_background_or_when_asked() {
    let write_units = |engine: &JournalEngine, n: usize| {
        let db = engine.keyspace("ks").unwrap();
        for i in 0..n {
            db.write(&batch(&format!("k{i}")), Durability::Synced)
                .unwrap();
        }
    };
    let open = |applier, checkpoint_interval| {
        let fs = SimFs::new();
        let options = JournalOptions::default()
            .with_applier(applier)
            .with_checkpoint_interval(checkpoint_interval)
            .with_checkpoint_bytes(1 << 30);
        JournalEngine::open(Arc::new(fs), Path::new(DIR), options).unwrap()
    };

    // Background, an hour's interval: steps apply, nothing is checkpointed.
    let engine = open(Applier::Background, Duration::from_secs(3600));
    let before = engine.counts().checkpoints;
    write_units(&engine, 5);
    wait_for_counts(&engine, "the applier did not apply", |c| c.apply_steps >= 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        engine.counts().checkpoints,
        before,
        "a background step checkpointed before its interval"
    );
    // Asked: one checkpoint.
    engine.checkpoint().unwrap();
    assert_eq!(engine.counts().checkpoints, before + 1);
    drop(engine);

    // Inline, a zero interval: time never makes an inline checkpoint due.
    let engine = open(Applier::Inline, Duration::ZERO);
    let before = engine.counts().checkpoints;
    write_units(&engine, 5);
    let counts = engine.counts();
    assert_eq!(counts.apply_steps, 5, "inline: a step per synced unit");
    assert_eq!(
        counts.checkpoints, before,
        "an inline step checkpointed by time"
    );
    drop(engine);

    // Background, a zero interval: the positive control, a checkpoint after the steps.
    let engine = open(Applier::Background, Duration::ZERO);
    let before = engine.counts().checkpoints;
    write_units(&engine, 1);
    wait_for_counts(&engine, "no checkpoint by interval", |c| {
        c.checkpoints > before
    });
}
