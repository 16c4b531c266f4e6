//! `compare prefetch`: block execution with and without completed prefetch, on a large
//! app state with a cold cache, and the small warm case where prefetch must cost little.
//!
//! Cold (issue 12): an app database of ≥ 2 GiB (the demo app's values of
//! `VALUE_BYTES`, one per key, keys scattered by a hash) is built once under `--dir` and
//! kept. Each sample builds a block of `--block-txs` `Tx::Add`s on random keys, then, in
//! both orders across samples:
//! - *without*: the OS page cache of the database file is evicted (`fsync`, then
//!   `posix_fadvise(DONTNEED)`) and the database reopened (an empty redb cache), outside
//!   the timed interval; then `execute_block` is timed;
//! - *with*: evicted and reopened the same way; the block's keys are queued on a prefetch
//!   session (`App::prefetch`) and the session is waited on until every key is fetched (the
//!   prefetch phase, timed apart); then `execute_block` is timed.
//!
//! Storage-read bytes (`/proc/self/io` `read_bytes`, every thread of the process) are taken
//! around each phase. Nothing is committed, so every sample reads the same state.
//!
//! Warm: a small state (`WARM_KEYS` keys) in a home whose pages are cached, block sync of
//! the accounts profile with prefetch on and off, interleaved in rounds; blocks/s medians
//! and their ratio. The check: prefetch on costs at most 5 % (ratio ≥ 0.95).
//!
//! Invariant: each timed execution's results are compared with the other mode's for the
//! same block (same codes), so a row is never the timing of a run that read wrong values.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flushpoint::demo::{Block, ChainSpec, Header, KvApp, Profile, Tx, account_key};
use flushpoint::prefetch::PrefetchPool;
use flushpoint::{
    App, Db, FlushPolicy, HoldingDb, Home, HomeEngine, HomeOptions, NoEvents, Node, RedbDb,
    RedbOptions,
};

use crate::sys::ProcIo;

/// Bytes of each value in the cold state. Why: 2 KiB values over the demo chain's 2^20
/// account keys give a 2 GiB state with a key count a build writes in minutes.
const VALUE_BYTES: usize = 2_040;
/// Keys the cold state holds (the demo chain's whole account key space).
const COLD_KEYS: u64 = 1 << 20;
/// Set transactions per block while building the cold state (≈ 2 MiB per block).
const BUILD_TXS: u64 = 1_024;
/// Blocks per held window while building (≈ 64 MiB per flush).
const BUILD_WINDOW_BLOCKS: u64 = 32;
/// Keys the warm state's adds touch.
const WARM_KEYS: u64 = 20_000;
/// The warm check's bar: prefetch on runs at least this fraction of prefetch off's blocks/s.
const WARM_RATIO_MIN: f64 = 0.95;

/// Arguments of `compare prefetch`.
#[derive(Debug, clap::Args)]
pub struct PrefetchArgs {
    /// Data directory on a real disk (the cold state is built once under it and kept).
    #[arg(long, default_value = "target/compare-data")]
    pub dir: PathBuf,
    /// Samples of the cold case (each: one block without and one with prefetch).
    #[arg(long, default_value_t = 5)]
    pub samples: u32,
    /// Add transactions per timed block.
    #[arg(long, default_value_t = 256)]
    pub block_txs: u64,
    /// Rounds of the warm case (each runs prefetch on and off).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Blocks per warm run.
    #[arg(long, default_value_t = 3_000)]
    pub warm_blocks: u64,
    /// A small state (128 MiB) and one sample: checks the harness, not the disk.
    #[arg(long)]
    pub quick: bool,
    /// Which case to run.
    #[arg(long, value_enum, default_value_t = Part::Both)]
    pub part: Part,
}

/// `--part`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The cold ≥ 2 GiB state only.
    Cold,
    /// The warm small case only.
    Warm,
    /// Both.
    Both,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Drops the OS page cache of `path` (its dirty pages are synced first, or DONTNEED
/// would keep them).
fn evict(path: &Path) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    f.sync_all()
        .map_err(|e| format!("fsync {}: {e}", path.display()))?;
    // SAFETY: a valid open descriptor; offset 0 and length 0 mean the whole file.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(format!(
            "posix_fadvise(DONTNEED) on {}: error {rc}",
            path.display()
        ));
    }
    Ok(())
}

fn block(h: u64, txs: Vec<Bytes>) -> Block {
    Block {
        header: Header {
            height: h,
            ..Header::default()
        },
        txs,
        ..Block::default()
    }
}

fn open_app(path: &Path, pool: Option<&PrefetchPool>) -> Result<KvApp<Arc<dyn Db>>, String> {
    let db: Arc<dyn Db> =
        Arc::new(RedbDb::open(path, "app", &RedbOptions::default()).map_err(|e| e.to_string())?);
    let app = KvApp::open(Arc::new(HoldingDb::new(db))).map_err(|e| e.to_string())?;
    Ok(match pool {
        Some(p) => app.with_prefetch(p),
        None => app,
    })
}

/// Builds the cold state at `path` unless a finished one is there (its marker names the
/// key count and value size).
fn build_state(path: &Path, keys: u64) -> Result<Duration, String> {
    let marker = path.with_extension(format!("built-{keys}x{VALUE_BYTES}"));
    if marker.exists() && path.exists() {
        return Ok(Duration::ZERO);
    }
    let _ = std::fs::remove_file(path);
    let started = Instant::now();
    let mut app = open_app(path, None)?;
    let e = |e: flushpoint::Error| e.to_string();
    app.hold().map_err(e)?;
    let mut h = 0;
    let mut n = 0;
    while n < keys {
        h += 1;
        let txs: Vec<Bytes> = (n..(n + BUILD_TXS).min(keys))
            .map(|i| {
                let mut v = vec![0u8; VALUE_BYTES];
                v[8..16].copy_from_slice(&i.to_be_bytes());
                Tx::Set(account_key(i), Bytes::from(v)).encode()
            })
            .collect();
        n += txs.len() as u64;
        app.execute_block(&block(h, txs)).map_err(e)?;
        app.commit().map_err(e)?;
        if h % BUILD_WINDOW_BLOCKS == 0 || n >= keys {
            app.prepare_flush().map_err(e)?;
            app.write_held().map_err(e)?;
        }
    }
    drop(app);
    std::fs::write(&marker, b"").map_err(|e| e.to_string())?;
    Ok(started.elapsed())
}

/// One cold phase's figures.
#[derive(Debug, Clone, Copy, Default)]
struct Phase {
    secs: f64,
    read_bytes: u64,
}

fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, Phase), String> {
    let io = ProcIo::now();
    let t = Instant::now();
    let v = f()?;
    let secs = t.elapsed().as_secs_f64();
    Ok((
        v,
        Phase {
            secs,
            read_bytes: ProcIo::now().since(&io).read_bytes,
        },
    ))
}

/// The result codes of executing `b` on `app`.
fn execute(app: &mut KvApp<Arc<dyn Db>>, b: &Block) -> Result<Vec<u32>, String> {
    let r = app.execute_block(b).map_err(|e| e.to_string())?;
    Ok(r.tx_results.iter().map(|t| t.code).collect())
}

/// Waits until the app's prefetch sessions have fetched every key they accepted.
fn wait_prefetched(app: &KvApp<Arc<dyn Db>>) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = app.prefetch_stats();
        let fetched: u64 = stats
            .iter()
            .map(|s| s.fetched + s.over_budget + s.read_errors)
            .sum();
        let want: u64 = stats.iter().map(|s| s.submitted).sum();
        if want == 0 {
            return Err("the prefetch session accepted no key (refused)".into());
        }
        if fetched >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("prefetch fetched {fetched} of {want} keys in 60 s"));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn cold(a: &PrefetchArgs) -> Result<bool, String> {
    let dir = a.dir.join("prefetch-cold");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("app.redb");
    let keys = if a.quick { 32 * 1024 } else { COLD_KEYS };
    let built = build_state(&path, keys)?;
    let size = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
    println!(
        "cold state: {keys} keys × {VALUE_BYTES} B, {:.2} GiB on disk{}",
        size as f64 / (1u64 << 30) as f64,
        if built.is_zero() {
            " (reused)".to_string()
        } else {
            format!(", built in {:.0} s", built.as_secs_f64())
        }
    );
    let pool = PrefetchPool::new(flushpoint::prefetch::PREFETCH_WORKERS_DEFAULT)
        .map_err(|e| e.to_string())?;
    let samples = if a.quick { 1 } else { a.samples };
    let (mut without, mut with, mut pre) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rb_without, mut rb_with, mut rb_pre) = (Vec::new(), Vec::new(), Vec::new());
    for s in 0..samples {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(s);
        let txs: Vec<Bytes> = (0..a.block_txs)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                Tx::Add(account_key((x >> 17) % keys), 1).encode()
            })
            .collect();
        // The app executes the block after the state's last (its committed height + 1).
        let probe = open_app(&path, None)?;
        let h = probe.committed().map_err(|e| e.to_string())?.height + 1;
        drop(probe);
        let b = block(h, txs);
        let mut codes = [Vec::new(), Vec::new()];
        // Alternate which mode goes first, so neither always runs on a disk the other warmed.
        let order = if s % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for prefetch in order {
            evict(&path)?;
            let mut app = open_app(&path, prefetch.then_some(&pool))?;
            if prefetch {
                let ((), p) = timed(|| {
                    app.prefetch(&b).map_err(|e| e.to_string())?;
                    wait_prefetched(&app)
                })?;
                pre.push(p.secs * 1e3);
                rb_pre.push(p.read_bytes as f64);
            }
            let (c, p) = timed(|| execute(&mut app, &b))?;
            codes[usize::from(prefetch)] = c;
            if prefetch {
                with.push(p.secs * 1e3);
                rb_with.push(p.read_bytes as f64);
            } else {
                without.push(p.secs * 1e3);
                rb_without.push(p.read_bytes as f64);
            }
        }
        if codes[0] != codes[1] {
            return Err(format!(
                "sample {s}: results differ with and without prefetch"
            ));
        }
    }
    let (m_without, m_with, m_pre) = (median(&mut without), median(&mut with), median(&mut pre));
    println!();
    println!(
        "| cold, {} adds per block, {samples} samples (medians) | ms | storage reads |",
        a.block_txs
    );
    println!("|---|---|---|");
    println!(
        "| execute, no prefetch | {m_without:.1} | {:.1} MiB |",
        median(&mut rb_without) / 1048576.0
    );
    println!(
        "| prefetch phase (until every key is fetched) | {m_pre:.1} | {:.1} MiB |",
        median(&mut rb_pre) / 1048576.0
    );
    println!(
        "| execute, after completed prefetch | {m_with:.2} | {:.2} MiB |",
        median(&mut rb_with) / 1048576.0
    );
    println!(
        "| execution speedup (no prefetch / after prefetch) | {:.1}× | |",
        m_without / m_with.max(1e-6)
    );
    let big_enough = a.quick || size >= 2 << 30;
    if !big_enough {
        println!("FAIL: the cold state is {size} bytes, below 2 GiB");
    }
    Ok(big_enough)
}

fn warm_run(dir: &Path, prefetch: bool, blocks: u64) -> Result<f64, String> {
    let _ = std::fs::remove_dir_all(dir);
    let home = Home::open_with(dir, HomeOptions::default().with_engine(HomeEngine::Redb))
        .map_err(|e| e.to_string())?;
    let pool = PrefetchPool::new(flushpoint::prefetch::PREFETCH_WORKERS_DEFAULT)
        .map_err(|e| e.to_string())?;
    let spec = ChainSpec {
        account_keys: WARM_KEYS,
        ..ChainSpec::new(5, Profile::Accounts)
    };
    let (mut node, _) = Node::open_home(
        home,
        |db| {
            let app = KvApp::open(Arc::new(HoldingDb::new(db)))?;
            Ok(Box::new(if prefetch {
                app.with_prefetch(&pool)
            } else {
                app
            }))
        },
        spec.chain(),
        Box::new(NoEvents),
    )
    .map_err(|e| e.to_string())?;
    let e = |e: flushpoint::Error| e.to_string();
    let t = Instant::now();
    node.start_block_sync(FlushPolicy::default(), Instant::now())
        .map_err(e)?;
    // The next block's transactions, built once: for its preview (prefetch) and the block.
    let mut upcoming: Option<Vec<Bytes>> = None;
    while node.height() < blocks {
        let (b, p, s) = match upcoming.take() {
            Some(txs) => spec.next_block_with(node.state(), txs),
            None => spec.next_block(node.state()),
        };
        if prefetch && b.header.height < blocks {
            let next = spec.preview(b.header.height + 1);
            node.prefetch_next(&next).map_err(e)?;
            upcoming = Some(next.txs);
        }
        let now = Instant::now();
        node.sync_block(&b, &p, &s, now).map_err(e)?;
        node.on_timer(now).map_err(e)?;
    }
    node.stop(Instant::now()).map_err(e)?;
    Ok(blocks as f64 / t.elapsed().as_secs_f64())
}

fn warm(a: &PrefetchArgs) -> Result<bool, String> {
    let blocks = if a.quick { 300 } else { a.warm_blocks };
    let rounds = if a.quick { 1 } else { a.rounds };
    let (mut on, mut off, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0.0; 2];
        for prefetch in order {
            let bps = warm_run(
                &a.dir.join(format!("prefetch-warm-{prefetch}")),
                prefetch,
                blocks,
            )?;
            pair[usize::from(prefetch)] = bps;
        }
        off.push(pair[0]);
        on.push(pair[1]);
        ratios.push(pair[1] / pair[0]);
    }
    let ratio = median(&mut ratios);
    println!();
    println!("| warm, accounts profile, {blocks} blocks, {rounds} rounds (medians) | blocks/s |");
    println!("|---|---|");
    println!("| block sync, prefetch off | {:.0} |", median(&mut off));
    println!("| block sync, prefetch on | {:.0} |", median(&mut on));
    println!("| on / off (per round) | {ratio:.3} (bar ≥ {WARM_RATIO_MIN}) |");
    let ok = a.quick || ratio >= WARM_RATIO_MIN;
    if !ok {
        println!("FAIL: prefetch costs more than 5 % on the warm case");
    }
    Ok(ok)
}

/// Runs `compare prefetch`; `Ok(false)` when a check failed (printed as FAIL).
pub fn run(a: &PrefetchArgs) -> Result<bool, String> {
    let c = a.part == Part::Warm || cold(a)?;
    let w = a.part == Part::Cold || warm(a)?;
    Ok(c && w)
}
