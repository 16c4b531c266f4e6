//! Property: dropping a `Node` in block sync without `stop` loses only what is held — blocks
//! applied since the last acknowledged flush point — and never what a flush point
//! acknowledged: the reopened home's handshake finds it consistent at exactly the durable
//! height reported before the drop (synchronous flush points), or at the end of the window
//! that was in flight (background: the drop writes it to the end), never below.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{
    Db, Event, EventKind, FlushPolicy, FlushTrigger, HandshakeCase, HoldingDb, Home, NoEvents,
    Node, ReadView,
};

fn kv_app(
    app_db: Arc<dyn Db>,
) -> flushpoint::Result<Box<dyn flushpoint::App<flushpoint::demo::DemoChain>>> {
    Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(app_db)))?))
}

fn policy(background: bool) -> FlushPolicy {
    FlushPolicy::default()
        .with_interval(Duration::from_secs(3600))
        .with_held_bytes_max(u64::MAX)
        .with_window_blocks_max(None)
        .with_background(background)
}

fn sync(node: &mut Node<flushpoint::demo::DemoChain>, spec: &ChainSpec, n: u64) {
    for _ in 0..n {
        let (b, p, c) = spec.next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
}

/// Syncs 4 blocks, takes a flush point, syncs 3 more and drops the node. With background
/// flush points it first waits for the window 1..4 to be acknowledged, and before the drop
/// submits the window 5..7 and syncs 2 more, so a window is in flight (or just written) at
/// the drop. Returns the durable height reported before the drop, the height applied, the
/// top of the last window submitted and the heights whose new-block event fired.
fn run_and_drop(path: &Path, spec: &ChainSpec, background: bool) -> (u64, u64, u64, Vec<u64>) {
    let fired = Arc::new(Mutex::new(Vec::new()));
    let f = fired.clone();
    let sink = move |e: &Event| {
        if let EventKind::NewBlock { .. } = e.kind {
            f.lock().unwrap().push(e.height);
        }
    };
    let home = Home::open(path).unwrap();
    let (mut node, report) = Node::open_home(home, kv_app, spec.chain(), Box::new(sink)).unwrap();
    assert_eq!(report.case, HandshakeCase::Fresh);
    node.start_block_sync(policy(background), Instant::now())
        .unwrap();
    sync(&mut node, spec, 4);
    node.flush_point(FlushTrigger::Interval, Instant::now())
        .unwrap();
    let mut submitted = node.height();
    if background {
        let deadline = Instant::now() + Duration::from_secs(60);
        while node.durable_height() < submitted {
            assert!(Instant::now() < deadline, "the flush thread never finished");
            std::thread::sleep(Duration::from_millis(1));
            node.on_timer(Instant::now()).unwrap();
        }
    }
    sync(&mut node, spec, 3);
    if background {
        let r = node.flush_point(FlushTrigger::Interval, Instant::now());
        assert_eq!(r.unwrap(), None, "submitted, not waited for");
        submitted = node.height();
        sync(&mut node, spec, 2);
    }
    let (durable, applied) = (node.durable_height(), node.height());
    // The acknowledged blocks are readable as durable before the drop.
    for h in 1..=durable {
        assert!(node.load_block(h, ReadView::Durable).unwrap().is_some());
    }
    drop(node);
    let fired = fired.lock().unwrap().clone();
    (durable, applied, submitted, fired)
}

#[test]
fn drop_in_block_sync_loses_held_blocks_never_acknowledged_ones() {
    for background in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home");
        let spec = ChainSpec::new(31, Profile::Light);
        let (durable, applied, submitted, fired) = run_and_drop(&path, &spec, background);
        println!(
            "background {background}: durable {durable}, applied {applied}, window submitted to {submitted}, events for {fired:?}"
        );
        if background {
            // The window 5..7 is acknowledged only once the node saw its thread finish.
            assert_eq!((applied, submitted), (9, 7));
            assert!(durable == 4 || durable == 7, "durable {durable}");
        } else {
            assert_eq!((applied, submitted, durable), (7, 4, 4));
        }
        assert_eq!(
            fired,
            (1..=durable).collect::<Vec<_>>(),
            "events only for durable blocks"
        );
        // Reopen: the home is unlocked, consistent, and at the flushed height exactly.
        let (node, report) = Node::open_home(
            Home::open(&path).unwrap(),
            kv_app,
            spec.chain(),
            Box::new(NoEvents),
        )
        .unwrap();
        assert_eq!(
            report.case,
            HandshakeCase::Consistent,
            "background {background}"
        );
        assert_eq!(
            report.height, submitted,
            "the drop writes a window in flight to the end"
        );
        assert!(report.height >= durable);
        assert_eq!(node.height(), submitted);
        for h in 1..=submitted {
            let b = node.load_block(h, ReadView::Durable).unwrap();
            assert_eq!(b.map(|b| b.height()), Some(h), "block {h} was written");
        }
        assert_eq!(
            node.load_block(submitted + 1, ReadView::Held).unwrap(),
            None,
            "a held block survived the drop"
        );
    }
}
