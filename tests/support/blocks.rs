//! A valid chain of demo blocks for the stores: each block with its complete part set and
//! a seen commit that commits it, heights contiguous, each block linked to the previous hash.
//!
//! Invariant: every block built here is one `BlockStore::save_block` accepts after its
//! predecessor; a test that wants a refusal changes a block itself.

use bytes::Bytes;
use flushpoint::demo::{Block, Commit, Header};
use flushpoint::store::BlockStore;
use flushpoint::{Hash, PartSet, Result};

use super::Rng;

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
