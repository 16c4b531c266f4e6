//! Block-sync throughput by write mode, on real redb files on the project disk, in one run:
//! deferred writes (flush points), the per-block consensus path, the reference node's old
//! path (legacy: 5 syncs per block), and the no-sync floor; plus a raw append+fdatasync
//! baseline and point reads with 64 MiB held.
//!
//! Every figure is a median over rounds run next to each other; ratios are taken within a
//! round. Each run asserts its outcome (sync counts per block), so it measures the path it
//! claims to. Run: `cargo bench --bench sync_modes` (env: ROUNDS, LIGHT_BLOCKS, HEAVY_BLOCKS,
//! BENCH_DIR).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flushpoint::db::{BackendCounts, CountingDb, SyncCounts};
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::{
    Batch, Db, DbWrapper, Durability, FlushPolicy, HoldingDb, Mode, NoEvents, Node, RedbDb,
    RedbOptions, Result,
};

/// Downgrades every write to `Buffered`: the no-fsync floor. Unsafe; measuring only.
#[derive(Debug)]
struct Unsynced<D>(D);

impl<D: Db> DbWrapper for Unsynced<D> {
    type Inner = D;
    fn inner(this: &Self) -> &D {
        &this.0
    }
    fn write(this: &Self, batch: &Batch, _durability: Durability) -> Result<()> {
        this.0.write(batch, Durability::Buffered)
    }
}

/// A counted database handle.
type Counted = Arc<CountingDb<Arc<dyn Db>>>;

#[derive(Debug, Clone, Copy, PartialEq)]
enum BenchMode {
    Deferred,
    PerBlock,
    Legacy,
    NoSync,
}

struct RunResult {
    ms_per_block: f64,
    syncs_per_block: f64,
    synced_batches_per_block: f64,
    write_amp: f64,
    disk_bytes: u64,
    user_bytes: u64,
    flush_points: u64,
}

fn run(dir: &Path, mode: BenchMode, profile: Profile, blocks: u64) -> RunResult {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let opts = RedbOptions::default();
    let open = |f: &str, n: &str| Arc::new(RedbDb::open(&dir.join(f), n, &opts).unwrap());
    let (b, s, a) = (
        open("blockstore.redb", "block store"),
        open("state.redb", "state"),
        open("app.redb", "app"),
    );
    let backend = |x: &RedbDb| x.backend_counts();
    let before: Vec<BackendCounts> = vec![backend(&b), backend(&s), backend(&a)];
    // The counter sits under the no-sync downgrade, so it counts what reaches the file.
    let wrap = |d: Arc<RedbDb>| -> (Arc<dyn Db>, Counted) {
        let counting = Arc::new(CountingDb::new(d as Arc<dyn Db>));
        let top: Arc<dyn Db> = if mode == BenchMode::NoSync {
            Arc::new(Unsynced(counting.clone()))
        } else {
            counting.clone()
        };
        (top, counting)
    };
    let ((tb, cb), (ts, cs), (ta, ca)) = (wrap(b.clone()), wrap(s.clone()), wrap(a.clone()));
    let spec = ChainSpec::new(42, profile);
    let app = KvApp::open(Arc::new(HoldingDb::new(ta))).unwrap();
    let (mut node, _) =
        Node::open(tb, ts, Box::new(app), spec.chain(), Box::new(NoEvents)).unwrap();
    let counts0: Vec<SyncCounts> = vec![cb.counts(), cs.counts(), ca.counts()];
    let start = Instant::now();
    match mode {
        BenchMode::Deferred | BenchMode::NoSync => node
            .start_block_sync(FlushPolicy::default(), start)
            .unwrap(),
        BenchMode::PerBlock => {}
        BenchMode::Legacy => node.set_per_block_mode(Mode::Legacy).unwrap(),
    }
    for _ in 0..blocks {
        let (blk, parts, seen) = spec.next_block(node.state());
        if node.mode() == Mode::BlockSync {
            node.sync_block(&blk, &parts, &seen, Instant::now())
                .unwrap();
        } else {
            node.commit_block(&blk, &parts, &seen).unwrap();
        }
    }
    let mut flush_points = node.deferred().flush_points;
    flush_points += u64::from(node.stop(Instant::now()).unwrap().is_some());
    let elapsed = start.elapsed();
    // Close the files first (redb writes unsynced pages at close), then count.
    let counters = [
        b.backend_counters(),
        s.backend_counters(),
        a.backend_counters(),
    ];
    let counts = [cb.counts(), cs.counts(), ca.counts()];
    drop((cb, cs, ca, b, s, a));
    let after: Vec<BackendCounts> = counters.iter().map(|c| c.snapshot()).collect();
    let syncs: u64 = after
        .iter()
        .zip(&before)
        .map(|(x, y)| (*x - *y).sync_data_calls)
        .sum();
    let written: u64 = after
        .iter()
        .zip(&before)
        .map(|(x, y)| (*x - *y).bytes_written)
        .sum();
    let synced: u64 = counts
        .iter()
        .zip(&counts0)
        .map(|(x, y)| (*x - *y).synced_batches)
        .sum();
    let user: u64 = counts
        .iter()
        .zip(&counts0)
        .map(|(x, y)| (*x - *y).bytes_written)
        .sum();
    let disk: u64 = ["blockstore.redb", "state.redb", "app.redb"]
        .iter()
        .map(|f| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(dir.join(f)).unwrap().blocks() * 512
        })
        .sum();
    let r = RunResult {
        ms_per_block: elapsed.as_secs_f64() * 1e3 / blocks as f64,
        syncs_per_block: syncs as f64 / blocks as f64,
        synced_batches_per_block: synced as f64 / blocks as f64,
        write_amp: written as f64 / user.max(1) as f64,
        disk_bytes: disk,
        user_bytes: user,
        flush_points,
    };
    // Assert the outcome, so each row measures the path it names.
    match mode {
        BenchMode::PerBlock => assert_eq!(
            synced,
            4 * blocks,
            "consensus path: 4 synced batches per block"
        ),
        BenchMode::Legacy => assert_eq!(
            synced,
            5 * blocks,
            "legacy path: 5 synced batches per block"
        ),
        BenchMode::Deferred => {
            assert!(flush_points >= 1);
            assert!(
                synced <= 3 * (flush_points + 1),
                "deferred: one synced batch per database per flush point"
            );
        }
        BenchMode::NoSync => assert_eq!(synced, 0, "no-sync: nothing synced"),
    }
    r
}

fn raw_fdatasync_p50(dir: &Path, n: usize) -> Duration {
    let path = dir.join("raw.bin");
    let mut f = std::fs::File::create(&path).unwrap();
    let buf = vec![7u8; 4096];
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f.write_all(&buf).unwrap();
            f.sync_data().unwrap();
            t.elapsed()
        })
        .collect();
    times.sort();
    let _ = std::fs::remove_file(path);
    times[n / 2]
}

fn point_read_with_64mib_held() -> (f64, f64) {
    let db = HoldingDb::new(flushpoint::MemoryDb::new("app"));
    let mut disk = Batch::new();
    for i in 0..100_000u64 {
        disk.put(
            flushpoint::demo::sha256(&i.to_be_bytes()).to_vec(),
            vec![1u8; 100],
        );
    }
    db.write(&disk, Durability::Synced).unwrap();
    db.hold().unwrap();
    let mut i = 1_000_000u64;
    while db.held_bytes() < 64 * 1024 * 1024 {
        let mut b = Batch::new();
        for _ in 0..1000 {
            b.put(
                flushpoint::demo::sha256(&i.to_be_bytes()).to_vec(),
                vec![2u8; 100],
            );
            i += 1;
        }
        db.write(&b, Durability::Synced).unwrap();
    }
    let held_keys: Vec<_> = (1_000_000u64..1_000_000 + 10_000)
        .map(|i| flushpoint::demo::sha256(&i.to_be_bytes()))
        .collect();
    let disk_keys: Vec<_> = (0u64..10_000)
        .map(|i| flushpoint::demo::sha256(&i.to_be_bytes()))
        .collect();
    let time = |keys: &[[u8; 32]]| {
        let t = Instant::now();
        for _ in 0..10 {
            for k in keys {
                assert!(db.get(k).unwrap().is_some());
            }
        }
        t.elapsed().as_nanos() as f64 / (10 * keys.len()) as f64
    };
    (time(&held_keys), time(&disk_keys))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn main() {
    let rounds = env_u64("ROUNDS", 3) as usize;
    let light = env_u64("LIGHT_BLOCKS", 1500);
    let heavy = env_u64("HEAVY_BLOCKS", 60);
    let root = std::env::var("BENCH_DIR").unwrap_or_else(|_| "target/bench-data".into());
    let root = Path::new(&root);
    std::fs::create_dir_all(root).unwrap();
    println!(
        "flushpoint sync_modes: {rounds} rounds, light {light} blocks, heavy {heavy} blocks, dir {}",
        root.display()
    );
    let modes = [
        BenchMode::Deferred,
        BenchMode::PerBlock,
        BenchMode::Legacy,
        BenchMode::NoSync,
    ];
    for (profile, n) in [(Profile::Light, light), (Profile::Heavy, heavy)] {
        let mut rows: Vec<Vec<RunResult>> = modes.iter().map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            for (i, m) in modes.iter().enumerate() {
                // Per-block paths are ~10× slower: fewer blocks keep each run short.
                let blocks = if matches!(m, BenchMode::PerBlock | BenchMode::Legacy) {
                    (n / 5).max(20)
                } else {
                    n
                };
                rows[i].push(run(&root.join("run"), *m, profile, blocks));
            }
        }
        println!("\n{profile:?} blocks (median of {rounds}):");
        println!(
            "| mode | ms/block | blocks/s | fdatasync/block | synced batches/block | write amp | flush points | disk/user bytes |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for (i, m) in modes.iter().enumerate() {
            let r = &rows[i];
            let ms = median(r.iter().map(|x| x.ms_per_block).collect());
            println!(
                "| {m:?} | {ms:.3} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {:.2} |",
                1e3 / ms,
                median(r.iter().map(|x| x.syncs_per_block).collect()),
                median(r.iter().map(|x| x.synced_batches_per_block).collect()),
                median(r.iter().map(|x| x.write_amp).collect()),
                r[0].flush_points,
                r[0].disk_bytes as f64 / r[0].user_bytes.max(1) as f64,
            );
        }
        let ratio = |a: usize, b: usize| -> f64 {
            median(
                (0..rounds)
                    .map(|k| rows[b][k].ms_per_block / rows[a][k].ms_per_block)
                    .collect(),
            )
        };
        println!(
            "speed-up of Deferred over PerBlock: {:.2}×, over Legacy: {:.2}×; NoSync over Deferred: {:.2}×",
            ratio(0, 1),
            ratio(0, 2),
            ratio(3, 0)
        );
    }
    let p50 = raw_fdatasync_p50(root, 200);
    println!("\nraw 4 KiB append + fdatasync p50: {} µs", p50.as_micros());
    let (held_ns, disk_ns) = point_read_with_64mib_held();
    println!(
        "point read with 64 MiB held (memory backend under the overlay): held key {held_ns:.0} ns, disk key {disk_ns:.0} ns"
    );
    let _ = std::fs::remove_dir_all(root.join("run"));
}
