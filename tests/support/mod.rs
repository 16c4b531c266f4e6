//! Helpers shared by the foundation's integration tests: a valid chain of blocks, a
//! deterministic byte generator, and the suites' environment switches.
//!
//! Each test crate uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use bytes::Bytes;
use flushpoint::demo::{Block, Commit, Header};
use flushpoint::store::BlockStore;
use flushpoint::{Hash, PartSet, Result};

/// splitmix64: small, seedable, good enough for test data.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn bytes(&mut self, n: usize) -> Bytes {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(n);
        Bytes::from(v)
    }
}

/// One block ready for `save_block`: the block, its complete part set and its seen commit.
#[derive(Debug, Clone)]
pub struct Saved {
    pub block: Block,
    pub parts: PartSet,
    pub seen_commit: Commit,
}

impl Saved {
    pub fn height(&self) -> u64 {
        self.block.height()
    }
    pub fn hash(&self) -> Hash {
        self.block.hash()
    }
    pub fn save(&self, store: &BlockStore<flushpoint::demo::Block>) -> Result<()> {
        store.save_block(&self.block, &self.parts, &self.seen_commit)
    }
}

fn signatures(height: u64, round: u32) -> Vec<Bytes> {
    (0..3u8)
        .map(|v| {
            let mut s = vec![v; 8];
            s.extend_from_slice(&height.to_be_bytes());
            s.extend_from_slice(&round.to_be_bytes());
            Bytes::from(s)
        })
        .collect()
}

/// The block at `height` following the block with `prev_hash`, carrying `txs`.
pub fn block_at(height: u64, prev_hash: Hash, txs: Vec<Bytes>) -> Saved {
    assert!(height >= 1, "test helper: heights start at 1");
    let header = Header {
        height,
        time_ms: 1_700_000_000_000u64.wrapping_add(height.wrapping_mul(1_000)),
        last_block_hash: prev_hash,
        data_hash: Block::data_hash_of(&txs),
        validators_hash: [0x11; 32],
        consensus_params_hash: [0x22; 32],
        app_hash: [height as u8; 32],
        last_results_hash: [0x33; 32],
    };
    let block = Block {
        header,
        txs,
        last_commit: Commit {
            height: height - 1,
            round: 0,
            block_hash: prev_hash,
            signatures: if height > 1 {
                signatures(height - 1, 0)
            } else {
                Vec::new()
            },
        },
    };
    let parts = PartSet::from_block(&block);
    let seen_commit = Commit {
        height,
        round: 1,
        block_hash: block.hash(),
        signatures: signatures(height, 1),
    };
    Saved {
        block,
        parts,
        seen_commit,
    }
}

/// `n` small transactions of `tx_bytes` each, from `rng`.
pub fn txs(rng: &mut Rng, n: usize, tx_bytes: usize) -> Vec<Bytes> {
    (0..n).map(|_| rng.bytes(tx_bytes)).collect()
}

/// A chain of `count` blocks starting at `first`, each with `tx_count` txs of `tx_bytes`.
/// A first height above 1 links to a made-up previous hash.
pub fn chain(first: u64, count: u64, tx_count: usize, tx_bytes: usize, seed: u64) -> Vec<Saved> {
    let mut rng = Rng(seed);
    let mut prev = if first == 1 { [0; 32] } else { [0xab; 32] };
    let mut out = Vec::new();
    for h in first..first + count {
        let s = block_at(h, prev, txs(&mut rng, tx_count, tx_bytes));
        prev = s.hash();
        out.push(s);
    }
    out
}

/// A block light enough for one part.
pub fn light_block(height: u64, prev_hash: Hash, seed: u64) -> Saved {
    let s = block_at(height, prev_hash, txs(&mut Rng(seed), 8, 200));
    assert_eq!(s.parts.total(), 1, "test helper: a light block is one part");
    s
}

/// Transactions sized so that the block splits into exactly 40 parts of 64 KiB.
pub fn forty_part_txs(seed: u64) -> Vec<Bytes> {
    // 39 txs of 64 KiB plus their 4-byte length prefixes, the header and the commit spill
    // just past 39 parts.
    txs(&mut Rng(seed), 39, 64 * 1024)
}

/// True when `FLUSHPOINT_FULL=1`: the long suites run their whole sweep, not CI's slice.
pub fn full() -> bool {
    std::env::var("FLUSHPOINT_FULL").is_ok_and(|v| v == "1")
}

/// The seed in `FLUSHPOINT_SEED`, else `default`; a value that is not a u64 panics rather
/// than silently replaying another seed.
pub fn seed(default: u64) -> u64 {
    match std::env::var("FLUSHPOINT_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("FLUSHPOINT_SEED={s:?} is not a u64")),
        Err(_) => default,
    }
}

/// The directory fates tried for a crash with `n` directory ops pending: all dropped, all
/// kept, every ordered prefix, and every subset up to `subsets_max_ops` pending ops, else
/// `samples` seeded random subsets.
pub fn dir_fates(
    n: usize,
    seed: u64,
    subsets_max_ops: usize,
    samples: usize,
) -> Vec<flushpoint::testing::DirFate> {
    use flushpoint::testing::DirFate;
    let mut v = vec![DirFate::DropAll, DirFate::KeepAll];
    v.extend((1..n).map(DirFate::Prefix));
    if n <= subsets_max_ops {
        v.extend((0..1u64 << n).map(DirFate::Mask));
    } else {
        let mut x = seed;
        v.extend((0..samples).map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            DirFate::Mask(x >> 7)
        }));
    }
    v
}

/// The file fates tried for a crash: unsynced writes dropped, kept, and landed or torn at
/// random (1 seed; 5 with `FLUSHPOINT_FULL=1`).
pub fn file_fates(seed: u64) -> Vec<flushpoint::testing::FileFate> {
    use flushpoint::testing::FileFate;
    let seeds = if full() { 5 } else { 1 };
    let mut v = vec![FileFate::DropAll, FileFate::KeepAll];
    v.extend((0..seeds).map(|i| FileFate::Random(seed.wrapping_add(i))));
    v
}

/// The event oracle across a crash: every event fired before it is for a block the
/// recovery kept (at or below `recovered`), and no block's event fires twice across the
/// two runs.
pub fn check_events(
    before: &[flushpoint::Event],
    after: &[flushpoint::Event],
    recovered: u64,
) -> std::result::Result<(), String> {
    if let Some(e) = before.iter().find(|e| e.height > recovered) {
        return Err(format!(
            "event for block {} fired, but the crash lost it (recovered at {recovered})",
            e.height
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for e in before.iter().chain(after) {
        if matches!(e.kind, flushpoint::EventKind::NewBlock { .. }) && !seen.insert(e.height) {
            return Err(format!("block {} fired twice", e.height));
        }
    }
    Ok(())
}
