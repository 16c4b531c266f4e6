//! `flushpoint::verify` on both engines: a clean home reports nothing and is left byte for
//! byte as it was; each check the module's table lists, fed a home damaged where that check
//! looks (written through the databases, so the engine itself reads back what was put),
//! reports a problem naming the database, the check and the height. The expected problems
//! come from the table in `src/verify.rs`, not from the code under test.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use flushpoint::codec::{RecordKind, decode_record, encode_record, keys};
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::testing::DirSnapshot;
use flushpoint::{
    Batch, Db, Durability, FlushPolicy, HoldingDb, Home, HomeEngine, HomeOptions, NoEvents, Node,
    VerifyReport,
};

const ENGINES: [HomeEngine; 2] = [HomeEngine::Redb, HomeEngine::Journal];
/// The home's height: 30 block-synced blocks, then consensus blocks.
const TOP: u64 = 40;

fn spec() -> ChainSpec {
    ChainSpec::new(3, Profile::Light)
}

fn synced_home(dir: &Path, engine: HomeEngine) {
    let home = Home::open_with(dir, HomeOptions::default().with_engine(engine)).unwrap();
    let (mut node, _) = Node::open_home(
        home,
        |db: Arc<dyn Db>| Ok(Box::new(KvApp::open(Arc::new(HoldingDb::new(db)))?)),
        spec().chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    node.start_block_sync(FlushPolicy::default(), Instant::now())
        .unwrap();
    while node.height() < 30 {
        let (b, p, c) = spec().next_block(node.state());
        node.sync_block(&b, &p, &c, Instant::now()).unwrap();
    }
    node.switch_to_consensus(Instant::now()).unwrap();
    while node.height() < TOP {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    node.stop(Instant::now()).unwrap();
}

fn verify_read_only(dir: &Path) -> VerifyReport {
    let home = Home::open_read_only(dir, HomeOptions::default()).unwrap();
    let app = KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone()))).unwrap();
    flushpoint::verify(&home, &app)
}

/// Which database a damage is written to.
#[derive(Clone, Copy)]
enum Which {
    BlockStore,
    State,
}

/// A payload re-framed under another key (a valid record in the wrong place).
fn reframed(db: &dyn Db, from: &[u8], to: &[u8], kind: RecordKind) -> Bytes {
    let v = db.get(from).unwrap().expect("the record to copy");
    let payload = decode_record(from, kind, &v).unwrap();
    encode_record(to, kind, payload)
}

/// Applies `damage` to a fresh home of `engine` and returns what verify reports.
fn damaged(engine: HomeEngine, which: Which, damage: impl Fn(&dyn Db, &mut Batch)) -> VerifyReport {
    let tmp = tempfile::tempdir().unwrap();
    synced_home(tmp.path(), engine);
    {
        let home = Home::open(tmp.path()).unwrap();
        let db = match which {
            Which::BlockStore => home.block_store_db.clone(),
            Which::State => home.state_db.clone(),
        };
        let mut batch = Batch::new();
        damage(&*db, &mut batch);
        db.write(&batch, Durability::Synced).unwrap();
    }
    verify_read_only(tmp.path())
}

/// Asserts `r` lists a problem in `db` whose check contains `check` at `height`.
fn assert_found(r: &VerifyReport, db: &str, check: &str, height: Option<u64>, case: &str) {
    assert!(
        r.problems
            .iter()
            .any(|p| p.db == db && p.check.contains(check) && p.height == height),
        "{case}: expected a `{check}` problem in {db} at {height:?}; found {:#?}",
        r.problems
    );
    assert!(!r.is_clean(), "{case}");
}

fn k(key: &[u8]) -> Bytes {
    Bytes::copy_from_slice(key)
}

#[test]
fn a_clean_home_is_clean_and_left_as_it_was() {
    for engine in ENGINES {
        let tmp = tempfile::tempdir().unwrap();
        synced_home(tmp.path(), engine);
        let before = DirSnapshot::take(tmp.path()).unwrap();
        let r = verify_read_only(tmp.path());
        assert!(r.is_clean(), "{engine}: {:#?}", r.problems);
        assert_eq!(r.block_store, (1, TOP));
        assert_eq!((r.state_height, r.app_height), (TOP, TOP));
        assert_eq!(r.counts.blocks, TOP);
        assert!(r.counts.parts >= TOP && r.counts.entries.iter().all(|n| *n > 0));
        let after = DirSnapshot::take(tmp.path()).unwrap();
        assert_eq!(
            before.first_difference(&after),
            None,
            "{engine}: verify wrote"
        );
    }
}

#[test]
fn each_check_reports_the_damage_it_looks_for() {
    for engine in ENGINES {
        let e = engine;
        // 1. A record whose frame is broken (a part): its frame and its block.
        let r = damaged(e, Which::BlockStore, |_, b| {
            b.put(
                k(&keys::part_key(20, 0)),
                Bytes::from_static(b"not a record"),
            );
        });
        assert_found(&r, "block store", "record frame", Some(20), "bad frame");
        assert_found(&r, "block store", "part 0", Some(20), "bad frame");
        // 2. A valid part of another block: the block no longer hashes to its meta.
        let r = damaged(e, Which::BlockStore, |db, b| {
            let v = reframed(
                db,
                &keys::part_key(21, 0),
                &keys::part_key(20, 0),
                RecordKind::BLOCK_PART,
            );
            b.put(k(&keys::part_key(20, 0)), v);
        });
        assert_found(&r, "block store", "block", Some(20), "foreign part");
        assert!(
            !r.problems.iter().any(|p| p.check == "record frame"),
            "{e}: foreign part framed well"
        );
        // 3. A missing meta.
        let r = damaged(e, Which::BlockStore, |_, b| {
            b.delete(k(&keys::height_key(keys::BLOCK_META, 15)));
        });
        assert_found(&r, "block store", "block meta", Some(15), "missing meta");
        // 4. A missing part.
        let r = damaged(e, Which::BlockStore, |_, b| {
            b.delete(k(&keys::part_key(16, 0)));
        });
        assert_found(&r, "block store", "part 0", Some(16), "missing part");
        // 5. A missing seen commit.
        let r = damaged(e, Which::BlockStore, |_, b| {
            b.delete(k(&keys::height_key(keys::SEEN_COMMIT, 25)));
        });
        assert_found(
            &r,
            "block store",
            "seen commit",
            Some(25),
            "missing seen commit",
        );
        // 6. A canonical commit that is not the one the next block carries.
        let r = damaged(e, Which::BlockStore, |db, b| {
            let from = keys::height_key(keys::BLOCK_COMMIT, 11);
            let to = keys::height_key(keys::BLOCK_COMMIT, 10);
            b.put(k(&to), reframed(db, &from, &to, RecordKind::COMMIT));
        });
        assert_found(&r, "block store", "block commit", Some(10), "wrong commit");
        // 7. A missing canonical commit.
        let r = damaged(e, Which::BlockStore, |_, b| {
            b.delete(k(&keys::height_key(keys::BLOCK_COMMIT, 33)));
        });
        assert_found(
            &r,
            "block store",
            "block commit",
            Some(33),
            "missing commit",
        );
        // 8. A hash index entry lost.
        let r = damaged(e, Which::BlockStore, |db, b| {
            // The meta's payload starts with the block's hash (docs/FORMAT.md).
            let key = keys::height_key(keys::BLOCK_META, 12);
            let v = db.get(&key).unwrap().unwrap();
            let payload = decode_record(&key, RecordKind::BLOCK_META, &v).unwrap();
            let hash: [u8; 32] = payload[..32].try_into().unwrap();
            b.delete(k(&keys::hash_key(&hash)));
        });
        assert_found(&r, "block store", "hash index", Some(12), "lost hash index");
        // 9. A record above the height.
        let r = damaged(e, Which::BlockStore, |db, b| {
            let from = keys::height_key(keys::BLOCK_META, 30);
            let to = keys::height_key(keys::BLOCK_META, 100);
            b.put(k(&to), reframed(db, &from, &to, RecordKind::BLOCK_META));
        });
        assert_found(
            &r,
            "block store",
            "records above the height",
            Some(100),
            "stray record",
        );
        // 10. A key of no record family.
        let r = damaged(e, Which::BlockStore, |_, b| {
            b.put(Bytes::from_static(&[0x7f, 1]), Bytes::from_static(b"x"));
        });
        assert_found(&r, "block store", "record key", None, "unknown key");
        // 11. A state history record whose frame is broken.
        let r = damaged(e, Which::State, |_, b| {
            b.put(
                k(&keys::height_key(keys::VALIDATORS, 7)),
                Bytes::from_static(b"garbage!"),
            );
        });
        assert_found(&r, "state", "record frame", Some(7), "bad history frame");
        assert_found(
            &r,
            "state",
            "history validators",
            Some(7),
            "bad history frame",
        );
        // 12. The genesis hash lost.
        let r = damaged(e, Which::State, |_, b| {
            b.delete(k(&keys::singleton(keys::GENESIS)));
        });
        assert_found(&r, "state", "genesis hash", None, "lost genesis hash");
        // 13. Heights no crash leaves: the state ahead of the block store (its block
        //     store state record says 20).
        let r = damaged(e, Which::BlockStore, |db, b| {
            for h in 21..=TOP {
                b.delete(k(&keys::height_key(keys::BLOCK_META, h)));
            }
            let key = keys::singleton(keys::BLOCK_STORE_STATE);
            let v = db.get(&key).unwrap().unwrap();
            let mut payload = decode_record(&key, RecordKind::BLOCK_STORE_STATE, &v)
                .unwrap()
                .to_vec();
            // {base u64, height u64}, big-endian (docs/FORMAT.md).
            payload[8..16].copy_from_slice(&20u64.to_be_bytes());
            b.put(
                k(&key),
                encode_record(&key, RecordKind::BLOCK_STORE_STATE, &payload),
            );
        });
        assert_found(&r, "home", "heights", None, "state ahead");
    }
}
