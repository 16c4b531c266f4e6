//! Every use of flushpoint's API in the harness lives here (the API will change; one file
//! to update): the write runs of flushpoint's modes, the measurement of its block shape,
//! the 100k-block index fixture, the index lookups and the held-overlay reads.
//!
//! The write runs drive the library the way `cli/src/cli/sync/mod.rs` does: a [`Home`] of three
//! redb files (or three [`MemoryDb`]s for the floor), [`Node::open`], then
//! `start_block_sync` + `sync_block` + `on_timer` (deferred, no-sync, memory) or
//! `commit_block` in a per-block mode (per-block = consensus path, legacy), then `stop`.
//!
//! Invariant: every run checks its outcome (durable heights, synced-batch counts) and every
//! lookup is checked against an independent oracle before it is timed; a failed check is an
//! `Err`, never a row.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::db::{CountingDb, SyncCounters};
use flushpoint::demo::DemoHistory;
use flushpoint::demo::{ChainSpec, KvApp, Profile, Tx};
use flushpoint::store::{BlockStore, StateStore};
use flushpoint::{
    Batch, Db, DbWrapper, Direction, Durability, FlushPolicy, HoldingDb, Home, HomeEngine,
    HomeOptions, KeyRange, MemoryDb, Mode, NoEvents, Node, Op, RedbOptions,
};

use crate::check::{Outcome, check};
use crate::shape::{Shape, Store};
use crate::sys::ProcIo;

/// Seed of the synthetic chain in every run (the peers' shape is measured on it too).
pub const CHAIN_SEED: u64 = 1;

/// True when the environment asks to plant a wrong oracle answer named `what`
/// (`COMPARE_SABOTAGE`); only the tests set it, to see the checks reject it.
fn sabotage(what: &str) -> bool {
    std::env::var("COMPARE_SABOTAGE").is_ok_and(|v| v == what)
}

/// A flushpoint mode measured by the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FpMode {
    /// Block sync with deferred writes (flush points).
    Deferred,
    /// Each block committed on the consensus path (1 + 3 synced batches).
    PerBlock,
    /// The reference node's old path (5 synced batches per block).
    Legacy,
    /// Deferred with every write downgraded to unsynced (not crash-safe).
    NoSync,
    /// Deferred over three `MemoryDb`s: the node's own CPU floor.
    Memory,
}

fn profile(name: &str) -> Result<Profile, String> {
    name.parse::<Profile>()
}

fn fp_err(what: &str) -> impl Fn(flushpoint::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Downgrades every write to `Buffered`: the no-fsync floor. Unsafe; measuring only.
#[derive(Debug)]
struct Unsynced(Arc<dyn Db>);

impl DbWrapper for Unsynced {
    type Inner = dyn Db;
    fn inner(this: &Self) -> &Self::Inner {
        &*this.0
    }
    fn write(this: &Self, batch: &Batch, _durability: Durability) -> flushpoint::Result<()> {
        this.0.write(batch, Durability::Buffered)
    }
    fn write_entries<'a>(
        this: &Self,
        entries: &mut dyn Iterator<Item = flushpoint::EntryRef<'a>>,
        _durability: Durability,
    ) -> flushpoint::Result<()> {
        this.0.write_entries(entries, Durability::Buffered)
    }
}

type Log = Arc<Mutex<Vec<crate::shape::RecordedOp>>>;

/// Records every op written (store, key, value length) and forwards to a `MemoryDb`.
#[derive(Debug)]
struct Recorder {
    inner: MemoryDb,
    store: Store,
    log: Log,
}

impl DbWrapper for Recorder {
    type Inner = MemoryDb;
    fn inner(this: &Self) -> &MemoryDb {
        &this.inner
    }
    fn write(this: &Self, batch: &Batch, durability: Durability) -> flushpoint::Result<()> {
        let mut log = this.log.lock().expect("recorder log");
        for op in batch.ops() {
            match op {
                Op::Put(k, v) => log.push((this.store, k.to_vec(), Some(v.len() as u32))),
                Op::Delete(k) => log.push((this.store, k.to_vec(), None)),
            }
        }
        drop(log);
        this.inner.write(batch, durability)
    }
}

/// Measures the records flushpoint's consensus path writes for blocks `1..=blocks` of
/// `profile_name` (over recording memory databases) and returns them as a [`Shape`].
pub fn measure_shape(profile_name: &str, blocks: u64) -> Result<Shape, String> {
    let spec = ChainSpec::new(CHAIN_SEED, profile(profile_name)?);
    let log: Log = Arc::default();
    let rec = |store: Store| -> Arc<dyn Db> {
        Arc::new(Recorder {
            inner: MemoryDb::new(store.name()),
            store,
            log: log.clone(),
        })
    };
    let app = KvApp::open(Arc::new(HoldingDb::new(rec(Store::App)))).map_err(fp_err("app"))?;
    let (mut node, _) = Node::open(
        rec(Store::Blocks),
        rec(Store::State),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .map_err(fp_err("open"))?;
    log.lock().expect("log").clear();
    let mut recorded = Vec::with_capacity(blocks as usize);
    for _ in 0..blocks {
        let (b, parts, c) = spec.next_block(node.state());
        node.commit_block(&b, &parts, &c)
            .map_err(fp_err("commit"))?;
        recorded.push(std::mem::take(&mut *log.lock().expect("log")));
    }
    node.stop(Instant::now()).map_err(fp_err("stop"))?;
    Ok(Shape::from_recorded(profile_name, &recorded))
}

/// What one flushpoint write run did.
#[derive(Debug, Clone, Copy, Default)]
pub struct FpRunOut {
    /// Blocks applied.
    pub blocks: u64,
    /// Time from the first block to the files closed (the last flush point included).
    pub elapsed: Duration,
    /// Time from the first block until every block written is durable (flushpoint rows:
    /// the stop's flush point returned), before the files' close; for the memory floor,
    /// the stop.
    pub durable: Duration,
    /// Real `sync_data` calls redb made on the three files in that time.
    pub syncs: u64,
    /// Batches written `Synced` over the three databases.
    pub synced_batches: u64,
    /// Flush points taken (the final one at `stop` included).
    pub flush_points: u64,
}

struct Dbs {
    top: [Arc<dyn Db>; 3],
    counting: [Arc<SyncCounters>; 3],
    home: Option<Home>,
    mem: Option<[Arc<MemoryDb>; 3]>,
}

fn open_dbs(mode: FpMode, dir: &Path) -> Result<Dbs, String> {
    let (inner, home, mem): ([Arc<dyn Db>; 3], _, _) = if mode == FpMode::Memory {
        let m = [
            Arc::new(MemoryDb::new("block store")),
            Arc::new(MemoryDb::new("state")),
            Arc::new(MemoryDb::new("app")),
        ];
        (
            [
                m[0].clone() as Arc<dyn Db>,
                m[1].clone() as Arc<dyn Db>,
                m[2].clone() as Arc<dyn Db>,
            ],
            None,
            Some(m),
        )
    } else {
        // The `fp-*` rows are redb's; the journal (the default engine) has its own rows.
        let home = Home::open_with(dir, HomeOptions::default().with_engine(HomeEngine::Redb))
            .map_err(fp_err("open home"))?;
        (
            [
                home.block_store_db.clone() as Arc<dyn Db>,
                home.state_db.clone() as Arc<dyn Db>,
                home.app_db.clone() as Arc<dyn Db>,
            ],
            Some(home),
            None,
        )
    };
    // The counter sits under the no-sync downgrade, so it counts what reaches the file.
    let wrap = |d: Arc<dyn Db>| -> (Arc<dyn Db>, Arc<SyncCounters>) {
        let c = Arc::new(CountingDb::new(d));
        let counters = c.counters();
        let top: Arc<dyn Db> = if mode == FpMode::NoSync {
            Arc::new(Unsynced(c))
        } else {
            c
        };
        (top, counters)
    };
    let [a, b, c] = inner;
    let ((ta, ca), (tb, cb), (tc, cc)) = (wrap(a), wrap(b), wrap(c));
    Ok(Dbs {
        top: [ta, tb, tc],
        counting: [ca, cb, cc],
        home,
        mem,
    })
}

/// A bench home's three redb databases (the `fp-*` rows open redb homes).
fn redb_dbs(home: &Home) -> Result<[&Arc<flushpoint::RedbDb>; 3], String> {
    home.redb_dbs()
        .ok_or_else(|| format!("home {} is not a redb home", home.path().display()))
}

fn redb_syncs(home: &Option<Home>) -> u64 {
    home.as_ref().map_or(0, |h| {
        h.redb_dbs().map_or(0, |dbs| {
            dbs.iter().map(|d| d.backend_counts().sync_data_calls).sum()
        })
    })
}

/// Runs `mode` on `profile_name` blocks in `dir` (created empty by the caller) until
/// `stop(blocks, elapsed)` says so. `on_start` is called just before the first block and
/// `on_end` just after the files are closed (the caller reads its counters there); then the
/// run checks its outcome: the durable heights (read back after a reopen) equal the blocks
/// applied, and the synced batches per block are the mode's.
pub fn run_write(
    mode: FpMode,
    profile_name: &str,
    dir: &Path,
    stop: &dyn Fn(u64, Duration) -> bool,
    on_start: &mut dyn FnMut(),
    on_end: &mut dyn FnMut(),
) -> Result<FpRunOut, String> {
    let spec = ChainSpec::new(CHAIN_SEED, profile(profile_name)?);
    let dbs = open_dbs(mode, dir)?;
    let backend = match &dbs.home {
        Some(h) => Some(redb_dbs(h)?.map(|d| d.backend_counters())),
        None => None,
    };
    let [tb, ts, ta] = dbs.top.clone();
    let app = KvApp::open(Arc::new(HoldingDb::new(ta))).map_err(fp_err("open app"))?;
    let (mut node, _) = Node::open(tb, ts, Box::new(app), spec.chain(), Box::new(NoEvents))
        .map_err(fp_err("open node"))?;
    let synced0: u64 = dbs
        .counting
        .iter()
        .map(|c| c.snapshot().synced_batches)
        .sum();
    let syncs0 = redb_syncs(&dbs.home);
    on_start();
    let start = Instant::now();
    match mode {
        FpMode::Deferred | FpMode::NoSync | FpMode::Memory => node
            .start_block_sync(FlushPolicy::default(), start)
            .map_err(fp_err("start block sync"))?,
        FpMode::PerBlock => node
            .set_per_block_mode(Mode::Consensus)
            .map_err(fp_err("mode"))?,
        FpMode::Legacy => node
            .set_per_block_mode(Mode::Legacy)
            .map_err(fp_err("mode"))?,
    }
    let mut blocks = 0u64;
    while !stop(blocks, start.elapsed()) {
        let (b, parts, c) = spec.next_block(node.state());
        if node.mode() == Mode::BlockSync {
            let now = Instant::now();
            node.sync_block(&b, &parts, &c, now)
                .map_err(fp_err("sync block"))?;
            node.on_timer(now).map_err(fp_err("timer"))?;
        } else {
            node.commit_block(&b, &parts, &c)
                .map_err(fp_err("commit block"))?;
        }
        blocks += 1;
    }
    let mut flush_points = node.deferred().flush_points;
    flush_points += u64::from(node.stop(Instant::now()).map_err(fp_err("stop"))?.is_some());
    let durable = start.elapsed();
    let synced: u64 = dbs
        .counting
        .iter()
        .map(|c| c.snapshot().synced_batches)
        .sum::<u64>()
        - synced0;
    let Dbs { top, home, mem, .. } = dbs;
    drop(top);
    // Close the files (redb writes at close) before the clock and the counters stop.
    let home_path = home.as_ref().map(|h| h.path().to_path_buf());
    drop(home);
    let elapsed = start.elapsed();
    let syncs = backend.map_or(0, |b| {
        b.iter().map(|c| c.snapshot().sync_data_calls).sum::<u64>()
    }) - syncs0;
    on_end();

    // Outcome: the durable heights are the blocks applied…
    let heights = match (&home_path, &mem) {
        (Some(p), _) => {
            let home = Home::open_existing(p).map_err(fp_err("reopen home"))?;
            durable_heights(
                home.block_store_db.clone(),
                home.state_db.clone(),
                home.app_db.clone(),
            )?
        }
        (None, Some(m)) => durable_heights(m[0].clone(), m[1].clone(), m[2].clone())?,
        (None, None) => return Err("no databases".into()),
    };
    // COMPARE_SABOTAGE=heights makes the oracle expect one block more: the tests use it to
    // see a wrong answer rejected end to end.
    let want = blocks + u64::from(sabotage("heights"));
    check(
        "durable heights (block store, state, app)",
        &Outcome::Heights(heights.to_vec()),
        &Outcome::Heights(vec![want; 3]),
    )
    .map_err(|e| e.to_string())?;
    // …and the synced batches are the mode's.
    if !path_is_the_modes(mode, synced, blocks, flush_points) {
        return Err(format!(
            "{mode:?}: {synced} synced batches for {blocks} blocks and {flush_points} flush points is not this mode's path"
        ));
    }
    Ok(FpRunOut {
        blocks,
        elapsed,
        durable,
        syncs,
        synced_batches: synced,
        flush_points,
    })
}

/// True when `synced` batches over `blocks` blocks and `flush_points` flush points are the
/// path `mode` names: 4 synced batches per block on the consensus path, 5 on the legacy
/// path, none without sync, and at most 3 per flush point (plus the close) when deferred.
pub fn path_is_the_modes(mode: FpMode, synced: u64, blocks: u64, flush_points: u64) -> bool {
    match mode {
        FpMode::PerBlock => synced == 4 * blocks,
        FpMode::Legacy => synced == 5 * blocks,
        FpMode::NoSync => synced == 0,
        FpMode::Deferred | FpMode::Memory => flush_points >= 1 && synced <= 3 * (flush_points + 1),
    }
}

fn durable_heights(bs: Arc<dyn Db>, st: Arc<dyn Db>, app: Arc<dyn Db>) -> Result<[u64; 3], String> {
    let bs = BlockStore::<flushpoint::demo::Block>::open(bs).map_err(fp_err("block store"))?;
    let st = StateStore::<flushpoint::demo::DemoChain>::open(st);
    let app = KvApp::open(Arc::new(HoldingDb::new(app))).map_err(fp_err("app"))?;
    let (_, o) = flushpoint::node::observe(&bs, &st, &app).map_err(fp_err("observe"))?;
    Ok([o.block_store_height, o.state_height, o.app_height])
}

// ---------------------------------------------------------------------------------------
// Index benchmarks.

/// One row of the index table.
#[derive(Debug, Clone)]
pub struct IndexRow {
    /// `disk` (the fixture's redb files) or `mem` (the same records in `MemoryDb`s).
    pub variant: &'static str,
    /// What is looked up, and whether it is a hit or a miss.
    pub lookup: String,
    /// Distinct keys looked up (each checked before timing).
    pub keys: usize,
    /// Nanoseconds per lookup (median pass).
    pub ns_per_lookup: f64,
    /// `/proc/self/io` rchar per lookup.
    pub rchar_per_lookup: f64,
    /// `/proc/self/io` read_bytes per lookup.
    pub read_bytes_per_lookup: f64,
    /// Read syscalls per lookup.
    pub syscr_per_lookup: f64,
    /// `sync_data` calls during the timed passes (redb's own counter; memory: 0).
    pub syncs: u64,
}

/// Builds (once) a home holding `blocks` light blocks under `dir`, by deferred block sync;
/// returns whether it was built now and the time it took.
pub fn build_fixture(dir: &Path, blocks: u64) -> Result<(bool, Duration), String> {
    let marker = dir.join(format!("FIXTURE-{blocks}-seed{CHAIN_SEED}.done"));
    if marker.exists() {
        return Ok((false, Duration::ZERO));
    }
    let _ = std::fs::remove_dir_all(dir);
    let t = Instant::now();
    let out = run_write(
        FpMode::Deferred,
        "light",
        dir,
        &|n, _| n >= blocks,
        &mut || {},
        &mut || {},
    )?;
    if out.blocks != blocks {
        return Err(format!("fixture: {} blocks, wanted {blocks}", out.blocks));
    }
    std::fs::write(&marker, b"built by compare index\n").map_err(|e| e.to_string())?;
    Ok((true, t.elapsed()))
}

struct Reader {
    bs: BlockStore<flushpoint::demo::Block>,
    st: StateStore<flushpoint::demo::DemoChain>,
    app: KvApp<Arc<dyn Db>>,
    app_db: Arc<dyn Db>,
    sync_count: Box<dyn Fn() -> u64>,
    /// Called before each timed pass (outside the clock): the cold variant drops the
    /// files' pages from the OS cache there.
    evict: Box<dyn Fn()>,
}

/// Index lookup settings.
#[derive(Debug, Clone, Copy)]
pub struct IndexConfig {
    /// Blocks in the fixture.
    pub blocks: u64,
    /// Distinct keys per lookup kind.
    pub keys: usize,
    /// Timed passes over the keys (the median pass is reported).
    pub passes: usize,
    /// Bytes to hold in the overlay.
    pub held_bytes: u64,
    /// Seed of the sampled heights and keys (printed; replays the same lookups).
    pub seed: u64,
}

/// How a reader is timed: its name, the syncs counter, the eviction before each pass.
struct Timing<'a> {
    variant: &'static str,
    passes: usize,
    syncs: &'a dyn Fn() -> u64,
    evict: &'a dyn Fn(),
}

fn time_lookups(
    tm: &Timing<'_>,
    lookup: &str,
    keys: usize,
    mut f: impl FnMut(usize) -> usize,
) -> IndexRow {
    let (variant, passes, syncs) = (tm.variant, tm.passes, tm.syncs);
    let mut io = ProcIo::default();
    let s0 = syncs();
    let mut per_pass = Vec::with_capacity(passes);
    let mut sink = 0usize;
    for _ in 0..passes {
        (tm.evict)();
        let io0 = ProcIo::now();
        let t = Instant::now();
        for i in 0..keys {
            sink = sink.wrapping_add(f(i));
        }
        per_pass.push(t.elapsed().as_nanos() as f64 / keys as f64);
        let d = ProcIo::now().since(&io0);
        io.rchar += d.rchar;
        io.read_bytes += d.read_bytes;
        io.syscr += d.syscr;
    }
    std::hint::black_box(sink);
    let n = (keys * passes) as f64;
    per_pass.sort_by(f64::total_cmp);
    IndexRow {
        variant,
        lookup: lookup.to_string(),
        keys,
        ns_per_lookup: per_pass[per_pass.len() / 2],
        rchar_per_lookup: io.rchar as f64 / n,
        read_bytes_per_lookup: io.read_bytes as f64 / n,
        syscr_per_lookup: io.syscr as f64 / n,
        syncs: syncs() - s0,
    }
}

/// The oracle of the app: the last write of each sampled key over heights `1..=tip`,
/// replayed from the chain's transactions (not read from any store).
fn app_oracle(spec: &ChainSpec, tip: u64, sample: &[Bytes]) -> HashMap<Bytes, Option<Bytes>> {
    let wanted: HashSet<&Bytes> = sample.iter().collect();
    let mut out = HashMap::new();
    for h in 1..=tip {
        for tx in spec.txs(h) {
            match Tx::decode(&tx) {
                Some(Tx::Set(k, v)) if wanted.contains(&k) => {
                    out.insert(k, Some(v));
                }
                Some(Tx::Delete(k)) if wanted.contains(&k) => {
                    out.insert(k, None);
                }
                _ => {}
            }
        }
    }
    out
}

fn rng(seed: &mut u64) -> u64 {
    *seed = flushpoint::testing::splitmix64(*seed);
    *seed
}

fn hash_outcome(h: [u8; 32]) -> Outcome {
    Outcome::Hash(h.to_vec())
}

fn run_reader(
    variant: &'static str,
    r: &Reader,
    cfg: &IndexConfig,
    rows: &mut Vec<IndexRow>,
) -> Result<(), String> {
    let spec = ChainSpec::new(CHAIN_SEED, Profile::Light);
    let tip = r.bs.height();
    check(
        "fixture height",
        &Outcome::Heights(vec![tip]),
        &Outcome::Heights(vec![cfg.blocks]),
    )
    .map_err(|e| e.to_string())?;
    let e = |x: flushpoint::Error| x.to_string();
    let ce = |x: crate::check::CheckError| x.to_string();
    let mut seed = cfg.seed;
    // Sampled heights below the tip, so the next block's header names each one's hash.
    let heights: Vec<u64> = (0..cfg.keys)
        .map(|_| 1 + rng(&mut seed) % (tip - 1))
        .collect();
    let mut hashes = Vec::with_capacity(heights.len());
    for &h in &heights {
        let next =
            r.bs.load_block_meta(h + 1)
                .map_err(e)?
                .ok_or(format!("oracle: no meta at {}", h + 1))?;
        hashes.push(
            flushpoint::demo::Header::from_bytes(&next.header)
                .map_err(|r| format!("oracle: meta {}: {r}", h + 1))?
                .last_block_hash,
        );
    }
    // COMPARE_SABOTAGE=index-hash: the oracle's first hash is wrong (tests only).
    if sabotage("index-hash") {
        hashes[0][0] ^= 1;
    }
    let syncs = &r.sync_count;
    let tm = Timing {
        variant,
        passes: cfg.passes,
        syncs: &**syncs,
        evict: &*r.evict,
    };

    // Block by height: its height and recomputed hash are the oracle's.
    let mut headers = Vec::with_capacity(heights.len());
    for (i, &h) in heights.iter().enumerate() {
        let b = r.bs.load_block(h).map_err(e)?;
        let got = b.as_ref().map_or(Outcome::Missing, |b| {
            Outcome::Block(b.header.height, b.hash().to_vec())
        });
        check(
            "block by height",
            &got,
            &Outcome::Block(h, hashes[i].to_vec()),
        )
        .map_err(ce)?;
        let b = b.expect("checked");
        // Part 0 is the first bytes of the block's encoding.
        let part = r.bs.load_block_part(h, 0).map_err(e)?;
        let enc = b.encode();
        let want = enc.slice(..part.as_ref().map_or(0, |p| p.len()).min(enc.len()));
        check(
            "part 0",
            &part.map_or(Outcome::Missing, |p| Outcome::Value(p.to_vec())),
            &Outcome::Value(want.to_vec()),
        )
        .map_err(ce)?;
        headers.push(b.header.clone());
    }
    rows.push(time_lookups(
        &tm,
        "block by height (hit)",
        heights.len(),
        |i| {
            r.bs.load_block(heights[i])
                .ok()
                .flatten()
                .map_or(0, |b| b.txs.len())
        },
    ));
    let misses: Vec<u64> = (0..cfg.keys as u64).map(|i| tip + 1 + i).collect();
    for &h in &misses {
        check(
            "block by height (miss)",
            &r.bs
                .load_block(h)
                .map_err(e)?
                .map_or(Outcome::Missing, |b| {
                    Outcome::Block(b.header.height, b.hash().to_vec())
                }),
            &Outcome::Missing,
        )
        .map_err(ce)?;
    }
    rows.push(time_lookups(
        &tm,
        "block by height (miss)",
        misses.len(),
        |i| usize::from(r.bs.load_block(misses[i]).ok().flatten().is_some()),
    ));

    // Block by hash.
    for (i, hash) in hashes.iter().enumerate() {
        let got =
            r.bs.load_block_by_hash(hash)
                .map_err(e)?
                .map_or(Outcome::Missing, |b| {
                    Outcome::Block(b.header.height, b.hash().to_vec())
                });
        check(
            "block by hash",
            &got,
            &Outcome::Block(heights[i], hash.to_vec()),
        )
        .map_err(ce)?;
    }
    rows.push(time_lookups(
        &tm,
        "block by hash (hit)",
        hashes.len(),
        |i| {
            r.bs.load_block_by_hash(&hashes[i])
                .ok()
                .flatten()
                .map_or(0, |b| b.txs.len())
        },
    ));
    let absent: Vec<[u8; 32]> = (0..cfg.keys as u64)
        .map(|i| flushpoint::demo::sha256(&[b"absent hash ".as_slice(), &i.to_be_bytes()].concat()))
        .collect();
    for a in &absent {
        let got =
            r.bs.load_block_by_hash(a)
                .map_err(e)?
                .map_or(Outcome::Missing, |b| {
                    Outcome::Block(b.header.height, b.hash().to_vec())
                });
        check("block by hash (miss)", &got, &Outcome::Missing).map_err(ce)?;
    }
    rows.push(time_lookups(
        &tm,
        "block by hash (miss)",
        absent.len(),
        |i| usize::from(r.bs.load_block_by_hash(&absent[i]).ok().flatten().is_some()),
    ));

    // One part; a block meta.
    rows.push(time_lookups(&tm, "part 0 (hit)", heights.len(), |i| {
        r.bs.load_block_part(heights[i], 0)
            .ok()
            .flatten()
            .map_or(0, |p| p.len())
    }));
    for (i, &h) in heights.iter().enumerate() {
        let got =
            r.bs.load_block_meta(h)
                .map_err(e)?
                .map_or(Outcome::Missing, |m| {
                    Outcome::Block(
                        flushpoint::demo::Header::from_bytes(&m.header).map_or(0, |hd| hd.height),
                        m.block_hash.to_vec(),
                    )
                });
        check("block meta", &got, &Outcome::Block(h, hashes[i].to_vec())).map_err(ce)?;
        check(
            "block meta (miss)",
            &r.bs
                .load_block_meta(tip + 1 + i as u64)
                .map_err(e)?
                .map_or(Outcome::Missing, |m| {
                    Outcome::Block(
                        flushpoint::demo::Header::from_bytes(&m.header).map_or(0, |hd| hd.height),
                        m.block_hash.to_vec(),
                    )
                }),
            &Outcome::Missing,
        )
        .map_err(ce)?;
    }
    rows.push(time_lookups(&tm, "block meta (hit)", heights.len(), |i| {
        r.bs.load_block_meta(heights[i])
            .ok()
            .flatten()
            .map_or(0, |m| m.part_count as usize)
    }));
    rows.push(time_lookups(&tm, "block meta (miss)", misses.len(), |i| {
        usize::from(r.bs.load_block_meta(misses[i]).ok().flatten().is_some())
    }));

    // State at height: validators and consensus params, checked against the header's hashes.
    for (i, &h) in heights.iter().enumerate() {
        let v = r.st.load_validators(h).map_err(e)?;
        check(
            "validators at height",
            &v.map_or(Outcome::Missing, |(_, v)| hash_outcome(v.hash())),
            &hash_outcome(headers[i].validators_hash),
        )
        .map_err(ce)?;
        let p = r.st.load_consensus_params(h).map_err(e)?;
        check(
            "params at height",
            &p.map_or(Outcome::Missing, |(_, p)| hash_outcome(p.hash())),
            &hash_outcome(headers[i].consensus_params_hash),
        )
        .map_err(ce)?;
    }
    rows.push(time_lookups(
        &tm,
        "validators at height (hit)",
        heights.len(),
        |i| {
            r.st.load_validators(heights[i])
                .ok()
                .flatten()
                .map_or(0, |(_, v)| v.validators.len())
        },
    ));
    rows.push(time_lookups(
        &tm,
        "params at height (hit)",
        heights.len(),
        |i| {
            r.st.load_consensus_params(heights[i])
                .ok()
                .flatten()
                .map_or(0, |(h, _)| h as usize)
        },
    ));

    // App keys: the oracle replays the chain's transactions.
    let mut sample: Vec<Bytes> = Vec::with_capacity(cfg.keys);
    while sample.len() < cfg.keys {
        let h = 1 + rng(&mut seed) % tip;
        for tx in spec.txs(h) {
            if let Some(Tx::Set(k, _)) = Tx::decode(&tx) {
                sample.push(k);
                break;
            }
        }
    }
    let oracle = app_oracle(&spec, tip, &sample);
    let mut live = Vec::new();
    for k in &sample {
        let want = oracle.get(k).cloned().flatten();
        let got = r.app.get(k).map_err(e)?;
        check(
            "app key",
            &got.map_or(Outcome::Missing, |v| Outcome::Value(v.to_vec())),
            &want
                .clone()
                .map_or(Outcome::Missing, |v| Outcome::Value(v.to_vec())),
        )
        .map_err(ce)?;
        if want.is_some() {
            live.push(k.clone());
        }
    }
    rows.push(time_lookups(&tm, "app key (hit)", live.len(), |i| {
        r.app.get(&live[i]).ok().flatten().map_or(0, |v| v.len())
    }));
    // Keys outside the chain's key space (2^20): never written.
    let absent_keys: Vec<Bytes> = (0..cfg.keys as u64)
        .map(|i| {
            Bytes::copy_from_slice(&flushpoint::demo::sha256(&((1u64 << 40) + i).to_be_bytes()))
        })
        .collect();
    for k in &absent_keys {
        check(
            "app key (miss)",
            &r.app
                .get(k)
                .map_err(e)?
                .map_or(Outcome::Missing, |v| Outcome::Value(v.to_vec())),
            &Outcome::Missing,
        )
        .map_err(ce)?;
    }
    rows.push(time_lookups(
        &tm,
        "app key (miss)",
        absent_keys.len(),
        |i| usize::from(r.app.get(&absent_keys[i]).ok().flatten().is_some()),
    ));

    held_overlay(&tm, &r.app_db, cfg, rows)
}

fn held_value(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8; 100]
}

fn held_key(i: u64) -> [u8; 32] {
    flushpoint::demo::sha256(&[b"held ".as_slice(), &i.to_be_bytes()].concat())
}

/// Reads against a `HoldingDb` over the app database holding `cfg.held_bytes`: a held
/// key (hit), a key held nowhere (miss, falls through to the database), and a held delete
/// of a key the database has (tombstone). Nothing held is ever written.
fn held_overlay(
    tm: &Timing<'_>,
    app_db: &Arc<dyn Db>,
    cfg: &IndexConfig,
    rows: &mut Vec<IndexRow>,
) -> Result<(), String> {
    let e = |x: flushpoint::Error| x.to_string();
    let ce = |x: crate::check::CheckError| x.to_string();
    let held = HoldingDb::new(app_db.clone());
    let dead: Vec<Bytes> = app_db
        .range(KeyRange::all(), Direction::Forward)
        .map_err(e)?
        .take(cfg.keys)
        .map(|r| r.map(|(k, _)| k))
        .collect::<flushpoint::Result<_>>()
        .map_err(e)?;
    held.hold().map_err(e)?;
    let mut n = 0u64;
    while held.held_bytes() < cfg.held_bytes {
        let mut b = Batch::new();
        for _ in 0..1000 {
            b.put(held_key(n).to_vec(), held_value(n));
            n += 1;
        }
        held.write(&b, Durability::Synced).map_err(e)?;
    }
    let mut b = Batch::new();
    for k in &dead {
        b.delete(k.clone());
    }
    held.write(&b, Durability::Synced).map_err(e)?;
    let mut seed = cfg.seed ^ 0x4e1d;
    let hit: Vec<u64> = (0..cfg.keys).map(|_| rng(&mut seed) % n).collect();
    let hit_keys: Vec<[u8; 32]> = hit.iter().map(|&i| held_key(i)).collect();
    let miss_keys: Vec<[u8; 32]> = (0..cfg.keys as u64)
        .map(|i| held_key(n + 1_000_000 + i))
        .collect();
    let val = |o: Option<Bytes>| o.map_or(Outcome::Missing, |v| Outcome::Value(v.to_vec()));
    for (i, k) in hit_keys.iter().enumerate() {
        check(
            "held hit",
            &val(held.get(k).map_err(e)?),
            &Outcome::Value(held_value(hit[i])),
        )
        .map_err(ce)?;
    }
    for k in &miss_keys {
        check(
            "held miss",
            &val(held.get(k).map_err(e)?),
            &Outcome::Missing,
        )
        .map_err(ce)?;
    }
    for k in &dead {
        check(
            "tombstone",
            &val(held.get(k).map_err(e)?),
            &Outcome::Missing,
        )
        .map_err(ce)?;
        // The delete covers a live key: the database below still has it.
        if held.get_durable(k).map_err(e)?.is_none() {
            return Err(format!(
                "tombstone over {k:?}: the database below has no value"
            ));
        }
    }
    let mib = held.held_bytes() as f64 / (1 << 20) as f64;
    let name = |what: &str| format!("{what}, {mib:.0} MiB held");
    rows.push(time_lookups(
        tm,
        &name("held point read (hit)"),
        hit_keys.len(),
        |i| held.get(&hit_keys[i]).ok().flatten().map_or(0, |v| v.len()),
    ));
    rows.push(time_lookups(
        tm,
        &name("held miss (falls through)"),
        miss_keys.len(),
        |i| usize::from(held.get(&miss_keys[i]).ok().flatten().is_some()),
    ));
    rows.push(time_lookups(tm, &name("held tombstone"), dead.len(), |i| {
        usize::from(held.get(&dead[i]).ok().flatten().is_some())
    }));
    // Dropped without `write_held`: nothing held reaches the database.
    drop(held);
    Ok(())
}

/// Runs the index lookups on the fixture in `dir` (Disk: its redb files; Mem: the same
/// records copied into `MemoryDb`s).
pub fn index_bench(dir: &Path, cfg: &IndexConfig) -> Result<Vec<IndexRow>, String> {
    let mut rows = Vec::new();
    let e = |x: flushpoint::Error| x.to_string();
    let home = Home::open_existing(dir).map_err(e)?;
    let counters = redb_dbs(&home)?.map(|d| d.backend_counters());
    let disk = [
        home.block_store_db.clone() as Arc<dyn Db>,
        home.state_db.clone() as Arc<dyn Db>,
        home.app_db.clone() as Arc<dyn Db>,
    ];
    {
        let r = reader(
            &disk,
            Box::new(move || counters.iter().map(|c| c.snapshot().sync_data_calls).sum()),
            Box::new(|| {}),
        )?;
        run_reader("disk", &r, cfg, &mut rows)?;
    }
    let mem: Vec<Arc<dyn Db>> = disk
        .iter()
        .map(|d| {
            let map = flushpoint::db::collect_range(&**d, KeyRange::all(), Direction::Forward)?
                .into_iter()
                .collect();
            Ok(Arc::new(MemoryDb::from_map(d.name(), map)) as Arc<dyn Db>)
        })
        .collect::<flushpoint::Result<_>>()
        .map_err(e)?;
    drop(disk);
    drop(home);
    let r = reader(
        &[mem[0].clone(), mem[1].clone(), mem[2].clone()],
        Box::new(|| 0),
        Box::new(|| {}),
    )?;
    run_reader("mem", &r, cfg, &mut rows)?;
    drop(r);
    drop(mem);

    // Disk, cold: a small redb cache, and the files' pages dropped from the OS cache before
    // each timed pass, so lookups read the disk.
    let options = RedbOptions::default().with_cache_bytes(COLD_CACHE_BYTES);
    let home = Home::open_with(dir, &options).map_err(e)?;
    let counters = redb_dbs(&home)?.map(|d| d.backend_counters());
    let files: Vec<std::path::PathBuf> = redb_dbs(&home)?
        .iter()
        .filter_map(|d| d.path().map(Path::to_path_buf))
        .collect();
    let disk = [
        home.block_store_db.clone() as Arc<dyn Db>,
        home.state_db.clone() as Arc<dyn Db>,
        home.app_db.clone() as Arc<dyn Db>,
    ];
    let r = reader(
        &disk,
        Box::new(move || counters.iter().map(|c| c.snapshot().sync_data_calls).sum()),
        Box::new(move || drop_os_cache(&files)),
    )?;
    let cold = IndexConfig {
        passes: cfg.passes.min(COLD_PASSES_MAX),
        ..*cfg
    };
    run_reader("disk-cold", &r, &cold, &mut rows)?;
    Ok(rows)
}

/// redb cache of the cold variant: far below the 2,000 sampled blocks' pages (≈ 18 MiB).
const COLD_CACHE_BYTES: usize = 1 << 20;
/// Cold passes are slow (each lookup may read the disk): at most this many.
const COLD_PASSES_MAX: usize = 3;

/// Drops the clean pages of `files` from the OS page cache (`POSIX_FADV_DONTNEED`).
fn drop_os_cache(files: &[std::path::PathBuf]) {
    use std::os::fd::AsRawFd;
    for p in files {
        if let Ok(f) = std::fs::File::open(p) {
            // SAFETY: a plain syscall on a file descriptor owned by `f` for the whole call;
            // it reads no memory of ours.
            unsafe {
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

fn reader(
    dbs: &[Arc<dyn Db>; 3],
    sync_count: Box<dyn Fn() -> u64>,
    evict: Box<dyn Fn()>,
) -> Result<Reader, String> {
    let e = |x: flushpoint::Error| x.to_string();
    Ok(Reader {
        bs: BlockStore::<flushpoint::demo::Block>::open(dbs[0].clone()).map_err(e)?,
        st: StateStore::<flushpoint::demo::DemoChain>::open(dbs[1].clone()),
        app: KvApp::open(Arc::new(HoldingDb::new(dbs[2].clone()))).map_err(e)?,
        app_db: dbs[2].clone(),
        sync_count,
        evict,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_check_accepts_each_modes_own_counts() {
        assert!(path_is_the_modes(FpMode::PerBlock, 40, 10, 0));
        assert!(path_is_the_modes(FpMode::Legacy, 50, 10, 0));
        assert!(path_is_the_modes(FpMode::NoSync, 0, 10, 1));
        assert!(path_is_the_modes(FpMode::Deferred, 6, 10_000, 2));
    }

    #[test]
    fn path_check_rejects_another_modes_counts() {
        // Consensus counts for a legacy run, and the reverse.
        assert!(!path_is_the_modes(FpMode::Legacy, 40, 10, 0));
        assert!(!path_is_the_modes(FpMode::PerBlock, 50, 10, 0));
        // A "no-sync" run that synced.
        assert!(!path_is_the_modes(FpMode::NoSync, 3, 10, 1));
        // A "deferred" run that synced per block, or took no flush point.
        assert!(!path_is_the_modes(FpMode::Deferred, 40, 10, 1));
        assert!(!path_is_the_modes(FpMode::Deferred, 0, 10, 0));
    }
}
