//! Property: the library reports what it decides through `tracing` — the handshake's
//! classification (case and the three heights), its repairs, every durable flush point (its
//! heights, bytes and how long the loop waited) in both flush modes, and a refusal — and
//! never prints.
//!
//! A target of its own: it installs the process's global `tracing` subscriber, which would
//! record (and slow) every other test of a shared binary.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{Db, FlushPolicy, HoldingDb, MemoryDb, NoEvents, Node};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One recorded event: its thread, target and fields rendered as text.
#[derive(Debug, Clone)]
struct Seen {
    thread: std::thread::ThreadId,
    target: String,
    fields: BTreeMap<String, String>,
}

impl Seen {
    fn message(&self) -> &str {
        self.fields.get("message").map_or("", String::as_str)
    }
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// A subscriber that records every event (a test double for the embedder's).
#[derive(Default, Clone)]
struct Recorder {
    events: Arc<Mutex<Vec<Seen>>>,
    next_span: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").replace('"', ""),
        );
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_span.fetch_add(1, Ordering::SeqCst) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(Seen {
            thread: std::thread::current().id(),
            target: event.metadata().target().to_string(),
            fields,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Recorder {
    /// The events with `message` this thread emitted since `mark`.
    fn find(&self, mark: usize, message: &str) -> Vec<Seen> {
        let me = std::thread::current().id();
        self.events.lock().unwrap()[mark..]
            .iter()
            .filter(|e| e.thread == me && e.message() == message)
            .cloned()
            .collect()
    }
    fn mark(&self) -> usize {
        self.events.lock().unwrap().len()
    }
}

/// One recorder for the whole test binary, installed as the global default before any
/// callsite is hit (scoped subscribers race with callsite-interest caching when tests run
/// in parallel); each test reads only its own thread's events.
fn recorder() -> &'static Recorder {
    static REC: std::sync::OnceLock<Recorder> = std::sync::OnceLock::new();
    REC.get_or_init(|| {
        let rec = Recorder::default();
        tracing::subscriber::set_global_default(rec.clone()).expect("first subscriber");
        rec
    })
}

fn open(
    dbs: &[Arc<MemoryDb>; 3],
    spec: &ChainSpec,
) -> flushpoint::Result<Node<flushpoint::demo::DemoChain>> {
    let app = KvApp::open(Arc::new(HoldingDb::new(dbs[2].clone() as Arc<dyn Db>)))?;
    Node::open(
        dbs[0].clone(),
        dbs[1].clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .map(|(n, _)| n)
}

#[test]
fn handshake_decisions_and_flush_points_are_traced_in_both_modes() {
    for background in [false, true] {
        let rec = recorder();
        let mark = rec.mark();
        let spec = ChainSpec::new(5, Profile::Light);
        let dbs = [
            Arc::new(MemoryDb::new("block store")),
            Arc::new(MemoryDb::new("state")),
            Arc::new(MemoryDb::new("app")),
        ];
        {
            let mut node = open(&dbs, &spec).unwrap();
            let now = Instant::now();
            node.start_block_sync(
                FlushPolicy::default()
                    .with_interval(Duration::from_secs(3600))
                    .with_window_blocks_max(Some(3))
                    .with_background(background),
                now,
            )
            .unwrap();
            for _ in 0..6 {
                let (b, p, c) = spec.next_block(node.state());
                node.sync_block(&b, &p, &c, now).unwrap();
            }
            node.stop(now).unwrap();
        }
        let classified = rec.find(mark, "handshake classified the home");
        assert_eq!(classified.len(), 1, "background {background}");
        assert_eq!(classified[0].target, "flushpoint::handshake");
        assert_eq!(classified[0].field("case"), "fresh");
        assert_eq!(classified[0].field("block_store_height"), "0");
        assert!(
            rec.find(mark, "handshake repaired the home").is_empty(),
            "a fresh home needs no repair"
        );
        let flushes = rec.find(mark, "flush point durable");
        let heights: Vec<(String, String)> = flushes
            .iter()
            .map(|e| (e.field("from").to_string(), e.field("to").to_string()))
            .collect();
        assert_eq!(
            heights,
            vec![("0".into(), "3".into()), ("3".into(), "6".into())],
            "background {background}: one event per durable window"
        );
        for f in &flushes {
            assert_eq!(f.target, "flushpoint::flush");
            assert!(f.field("bytes").parse::<u64>().unwrap() > 0);
            assert_eq!(f.field("background"), background.to_string());
        }
        if background {
            assert_eq!(
                rec.find(mark, "flush point submitted to the flush thread")
                    .len(),
                2,
                "both windows went to the flush thread"
            );
        }
    }
}

#[test]
fn a_repair_and_a_refusal_are_traced() {
    recorder();
    let spec = ChainSpec::new(6, Profile::Light);
    let dbs = [
        Arc::new(MemoryDb::new("block store")),
        Arc::new(MemoryDb::new("state")),
        Arc::new(MemoryDb::new("app")),
    ];
    // Three consensus blocks, then the app loses its last commit: app behind by one.
    let app_before = {
        let mut node = open(&dbs, &spec).unwrap();
        node.commit_block_for_test(&spec, 2);
        let app = dbs[2].snapshot();
        node.commit_block_for_test(&spec, 1);
        node.stop(Instant::now()).unwrap();
        app
    };
    let app_db = Arc::new(MemoryDb::from_map("app", app_before));
    let dbs = [dbs[0].clone(), dbs[1].clone(), app_db];
    let rec = recorder();
    let mark = rec.mark();
    open(&dbs, &spec).unwrap();
    let repaired = rec.find(mark, "handshake repaired the home");
    assert_eq!(repaired.len(), 1);
    assert_eq!(repaired[0].field("case"), "app-behind");
    assert_eq!(repaired[0].field("app_replayed"), "1");
    // A state store emptied under blocks and an app: refused, and the refusal is traced.
    let empty_state = Arc::new(MemoryDb::new("state"));
    let dbs = [dbs[0].clone(), empty_state, dbs[2].clone()];
    let mark = rec.mark();
    assert!(open(&dbs, &spec).is_err());
    assert!(
        rec.find(mark, "handshake classified the home").is_empty(),
        "a refused home is not classified as repairable"
    );
    let refused = rec.find(
        mark,
        "handshake refused the home; nothing was changed on disk",
    );
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].field("block_store_height"), "3");
    assert_eq!(refused[0].field("state_height"), "0");
}

/// Commits `n` consensus blocks.
trait CommitForTest {
    fn commit_block_for_test(&mut self, spec: &ChainSpec, n: u64);
}

impl CommitForTest for Node<flushpoint::demo::DemoChain> {
    fn commit_block_for_test(&mut self, spec: &ChainSpec, n: u64) {
        for _ in 0..n {
            let (b, p, c) = spec.next_block(self.state());
            self.commit_block(&b, &p, &c).unwrap();
        }
    }
}
