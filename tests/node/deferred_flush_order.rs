//! Property: a flush point writes block store (blocks F+1..F′ and the flush record), then
//! state, then app — each one synced batch, each after the previous returned `Ok`; a failure
//! at any step stops there, poisons the node and fires no event; events fire in block order,
//! only after the app's batch, at most once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flushpoint::codec::keys;
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::testing::{FailAfter, FailingDb, RecordingDb, WriteLog};
use flushpoint::{
    Db, Durability, Error, Event, EventKind, FlushPolicy, FlushTrigger, HoldingDb, MemoryDb, Node,
};

type Rec = Arc<RecordingDb<FailingDb<MemoryDb>>>;

const NAMES: [&str; 3] = ["block store", "state", "app"];
const WINDOW: u64 = 3;

struct Rig {
    log: WriteLog,
    dbs: [Rec; 3],
    /// (event, log length when it fired)
    fired: Arc<Mutex<Vec<(Event, usize)>>>,
    node: Node<flushpoint::demo::DemoChain>,
}

/// A node whose three databases record into one log; `budgets[i]` writes succeed on
/// database i before it fails.
fn rig(spec: &ChainSpec, budgets: [FailAfter; 3]) -> Rig {
    let log = WriteLog::new();
    let dbs: [Rec; 3] = [0, 1, 2].map(|i| {
        Arc::new(RecordingDb::new(
            FailingDb::new(MemoryDb::new(NAMES[i]), budgets[i].clone()),
            log.clone(),
        ))
    });
    let fired = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let fired = fired.clone();
        let log = log.clone();
        move |e: &Event| fired.lock().unwrap().push((e.clone(), log.len()))
    };
    let app = KvApp::open(Arc::new(HoldingDb::new(dbs[2].clone() as Arc<dyn Db>))).unwrap();
    let (node, _) = Node::open(
        dbs[0].clone(),
        dbs[1].clone(),
        Box::new(app),
        spec.chain(),
        Box::new(sink),
    )
    .unwrap();
    Rig {
        log,
        dbs,
        fired,
        node,
    }
}

fn policy() -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(Duration::from_secs(3600))
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(Some(WINDOW))
        .with_background(false)
}

fn never() -> [FailAfter; 3] {
    [FailAfter::never(), FailAfter::never(), FailAfter::never()]
}

/// Syncs one window; returns the log length before it.
fn sync_window(r: &mut Rig, spec: &ChainSpec) -> (usize, flushpoint::Result<()>) {
    let start = r.log.len();
    let now = Instant::now();
    for i in 0..WINDOW {
        let (b, p, c) = spec.next_block(r.node.state());
        match r.node.sync_block(&b, &p, &c, now) {
            Ok(rep) => {
                assert_eq!(
                    rep.is_some(),
                    i == WINDOW - 1,
                    "a flush point ends the window only"
                );
                if let Some(rep) = rep {
                    assert_eq!(rep.trigger, FlushTrigger::WindowBlocks);
                }
            }
            Err(e) => {
                assert_eq!(i, WINDOW - 1, "only the flush point can fail here: {e}");
                return (start, Err(e));
            }
        }
        if i < WINDOW - 1 {
            assert_eq!(r.log.len(), start, "a held block writes nothing");
        }
    }
    (start, Ok(()))
}

fn has_key(batch: &flushpoint::Batch, key: &[u8]) -> bool {
    batch.ops().iter().any(|op| op.key().as_ref() == key)
}

#[test]
fn flush_point_writes_block_store_then_state_then_app_one_synced_batch_each() {
    let spec = ChainSpec::new(21, Profile::Light);
    let mut r = rig(&spec, never());
    r.node.start_block_sync(policy(), Instant::now()).unwrap();
    for window in 0..2u64 {
        let (start, res) = sync_window(&mut r, &spec);
        res.unwrap();
        let recs = r.log.records()[start..].to_vec();
        let order: Vec<_> = recs.iter().map(|w| (w.db.as_str(), w.durability)).collect();
        assert_eq!(
            order,
            vec![
                ("block store", Durability::Synced),
                ("state", Durability::Synced),
                ("app", Durability::Synced)
            ],
            "window {window}: one synced batch per database, in crash-safe order"
        );
        let (from, to) = (window * WINDOW, (window + 1) * WINDOW);
        let bs = &recs[0].batch;
        assert!(
            has_key(bs, &keys::singleton(keys::FLUSH_RECORD)),
            "the flush record (0x07)"
        );
        for h in from + 1..=to {
            assert!(
                has_key(bs, &keys::height_key(keys::BLOCK_META, h)),
                "block {h}"
            );
        }
        assert!(!has_key(bs, &keys::height_key(keys::BLOCK_META, to + 1)));
        if from > 0 {
            assert!(
                !has_key(bs, &keys::height_key(keys::BLOCK_META, from)),
                "blocks of an earlier window are not written again"
            );
        }
        assert!(has_key(&recs[1].batch, &keys::singleton(keys::STATE)));
        for h in from + 1..=to {
            assert!(has_key(&recs[1].batch, &keys::height_key(keys::RESULTS, h)));
        }
        assert!(has_key(&recs[2].batch, &keys::singleton(keys::APP_META)));
        assert_eq!(
            r.node.block_store().load_flush_record().unwrap(),
            Some(flushpoint::records::FlushRecord { from, to })
        );
    }
}

/// Fails the flush point's step `step` (0 block store, 1 state, 2 app).
fn fail_at_step(step: usize) {
    let spec = ChainSpec::new(22, Profile::Light);
    // A run without faults tells how many writes each database takes before the flush.
    let probe = rig(&spec, never());
    let before: [u64; 3] = [0, 1, 2].map(|i| {
        probe
            .log
            .records()
            .iter()
            .filter(|w| w.db == NAMES[i])
            .count() as u64
    });
    let budgets = [0, 1, 2].map(|i| {
        if i == step {
            FailAfter::new(before[i])
        } else {
            FailAfter::never()
        }
    });
    let mut r = rig(&spec, budgets);
    r.node.start_block_sync(policy(), Instant::now()).unwrap();
    let (start, res) = sync_window(&mut r, &spec);
    let err = res.expect_err("the injected failure surfaces from the flush point");
    assert!(
        !matches!(err, Error::Poisoned { .. }),
        "the cause is reported first: {err}"
    );
    assert_eq!(r.dbs[step].inner().failures(), 1, "the fault fired, once");
    let written: Vec<_> = r.log.records()[start..]
        .iter()
        .map(|w| w.db.clone())
        .collect();
    assert_eq!(
        written,
        NAMES[..step].to_vec(),
        "steps before {} were written; it and every later step were not",
        NAMES[step]
    );
    assert!(
        r.fired.lock().unwrap().is_empty(),
        "no event of the window fired"
    );
    // Poisoned: the next block is refused and nothing more is written anywhere.
    let (b, p, c) = spec.next_block(r.node.state());
    let len = r.log.len();
    assert!(matches!(
        r.node.sync_block(&b, &p, &c, Instant::now()),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(
        r.node.on_timer(Instant::now()),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(
        r.node.flush_point(FlushTrigger::Stop, Instant::now()),
        Err(Error::Poisoned { .. })
    ));
    assert_eq!(r.log.len(), len);
    assert_eq!(r.dbs[step].inner().failures(), 1, "no write was retried");
    assert!(r.fired.lock().unwrap().is_empty());
}

#[test]
fn block_store_step_failure_stops_the_flush_and_poisons() {
    fail_at_step(0);
}

#[test]
fn state_step_failure_stops_the_flush_and_poisons() {
    fail_at_step(1);
}

#[test]
fn app_step_failure_stops_the_flush_and_poisons() {
    fail_at_step(2);
}

#[test]
fn events_fire_in_block_order_only_after_the_app_batch_at_most_once() {
    let spec = ChainSpec::new(23, Profile::Light);
    let mut r = rig(&spec, never());
    r.node.start_block_sync(policy(), Instant::now()).unwrap();
    let mut seen = 0;
    for window in 0..3u64 {
        let (start, res) = sync_window(&mut r, &spec);
        res.unwrap();
        let app_batch_end = start + 3;
        let fired = r.fired.lock().unwrap().clone();
        let new = &fired[seen..];
        seen = fired.len();
        assert!(!new.is_empty());
        for (e, log_len) in new {
            assert_eq!(
                *log_len, app_batch_end,
                "event {e:?} fired only once the app's batch was durable"
            );
        }
        let heights: Vec<u64> = new.iter().map(|(e, _)| e.height).collect();
        let mut sorted = heights.clone();
        sorted.sort();
        assert_eq!(heights, sorted, "block order");
        let blocks: Vec<u64> = new
            .iter()
            .filter(|(e, _)| matches!(e.kind, EventKind::NewBlock { .. }))
            .map(|(e, _)| e.height)
            .collect();
        let want: Vec<u64> = (window * WINDOW + 1..=(window + 1) * WINDOW).collect();
        assert_eq!(
            blocks, want,
            "one NewBlock per block of the window, none of earlier ones"
        );
    }
    // A flush point with nothing held and a clean stop fire nothing again.
    r.node
        .flush_point(FlushTrigger::Stop, Instant::now())
        .unwrap();
    let fired = r.fired.lock().unwrap().clone();
    let mut ids: Vec<_> = fired.iter().map(|(e, _)| format!("{e:?}")).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "each event fired at most once");
    assert_eq!(n, seen);
}
