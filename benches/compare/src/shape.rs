//! The shape of a block, measured on flushpoint's own chain, and the peers' blocks built
//! from it.
//!
//! A [`Shape`] is a cycle of sampled blocks; each sampled block is the list of records the
//! consensus path wrote for it (store, key length, value length, put or delete, and the kind
//! of key). A peer's block `h` is the sampled block `(h − 1) mod cycle` with the same
//! records, so peers write the same number of records of the same sizes into the same three
//! stores. Keys: a key flushpoint rewrites in more than one sampled block (the height
//! descriptor, the state record, the app's meta) is written with the same bytes; other
//! block-store and state keys become `op index (1 B) ‖ height (8 B BE)` padded or cut to the
//! measured length (a sequential stream per record kind, as flushpoint's prefixed keys);
//! other app keys are random in a 2²⁰ key space (overwrites, as the chain's app). Values are
//! slices of a pseudo-random (incompressible) pool, as flushpoint's parts and app values.
//!
//! Invariant: a peer block is a pure function of the shape and `h`: the same run writes the
//! same bytes every round.

use flushpoint::testing::splitmix64;
use serde::{Deserialize, Serialize};

/// Which of the three stores a record goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Store {
    /// The block store (block meta, parts, commits, height descriptor).
    Blocks,
    /// The state store (state record, block results, history).
    State,
    /// The application's database.
    App,
}

impl Store {
    /// The three stores, in flush order.
    pub const ALL: [Store; 3] = [Store::Blocks, Store::State, Store::App];

    /// A short name (table / keyspace / column family name of the peers).
    pub fn name(self) -> &'static str {
        match self {
            Store::Blocks => "blocks",
            Store::State => "state",
            Store::App => "app",
        }
    }

    /// Position in [`Store::ALL`].
    pub fn index(self) -> usize {
        match self {
            Store::Blocks => 0,
            Store::State => 1,
            Store::App => 2,
        }
    }
}

/// How a peer builds a record's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyKind {
    /// The same key every time it appears (rewritten).
    Fixed(Vec<u8>),
    /// One new key per block, sequential in height.
    Seq,
    /// A random key of the app's key space.
    Random,
}

/// A recorded write: store, key, value length (`None`: a delete).
pub type RecordedOp = (Store, Vec<u8>, Option<u32>);

/// One record of a sampled block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpShape {
    /// Target store.
    pub store: Store,
    /// Key length in bytes.
    pub key_len: u32,
    /// Value length in bytes (0 for a delete).
    pub value_len: u32,
    /// A delete rather than a put.
    pub delete: bool,
    /// How a peer builds the key.
    pub kind: KeyKind,
}

/// A cycle of sampled blocks of one profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// Profile name (`light` or `heavy`).
    pub profile: String,
    /// The sampled blocks, in height order from height 1.
    pub blocks: Vec<Vec<OpShape>>,
}

/// Distinct app keys of the peers: the chain's own key space.
const APP_KEY_SPACE: u64 = 1 << 20;
/// Size of the value pool (values are slices of it).
pub const POOL_BYTES: usize = 32 << 20;

/// The value pool: `POOL_BYTES` pseudo-random bytes.
pub fn pool() -> Vec<u8> {
    let mut v = Vec::with_capacity(POOL_BYTES);
    let mut x = 0x5eed_u64;
    while v.len() < POOL_BYTES {
        x = splitmix64(x);
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

/// One record of a peer's block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerOp<'a> {
    /// Target store.
    pub store: Store,
    /// The key.
    pub key: Vec<u8>,
    /// The value (`None`: delete).
    pub value: Option<&'a [u8]>,
}

/// Per-store sums over the cycle, per block.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreSummary {
    /// Records per block.
    pub ops: f64,
    /// Key bytes per block.
    pub key_bytes: f64,
    /// Value bytes per block.
    pub value_bytes: f64,
}

impl Shape {
    /// Classifies recorded blocks: `recorded[i]` is block `i + 1`'s records as
    /// `(store, key, value length or None for a delete)`.
    pub fn from_recorded(profile: &str, recorded: &[Vec<RecordedOp>]) -> Shape {
        use std::collections::HashMap;
        let mut seen_in: HashMap<(Store, &[u8]), usize> = HashMap::new();
        for ops in recorded {
            let mut this_block = std::collections::HashSet::new();
            for (s, k, _) in ops {
                if this_block.insert((*s, k.as_slice())) {
                    *seen_in.entry((*s, k.as_slice())).or_default() += 1;
                }
            }
        }
        let blocks = recorded
            .iter()
            .map(|ops| {
                ops.iter()
                    .map(|(s, k, v)| {
                        let kind = if seen_in[&(*s, k.as_slice())] > 1 {
                            KeyKind::Fixed(k.clone())
                        } else if *s == Store::App {
                            KeyKind::Random
                        } else {
                            KeyKind::Seq
                        };
                        OpShape {
                            store: *s,
                            key_len: k.len() as u32,
                            value_len: v.unwrap_or(0),
                            delete: v.is_none(),
                            kind,
                        }
                    })
                    .collect()
            })
            .collect();
        Shape {
            profile: profile.to_string(),
            blocks,
        }
    }

    /// The sampled block peers use for height `h` (h ≥ 1).
    pub fn sample(&self, h: u64) -> &[OpShape] {
        &self.blocks[((h - 1) % self.blocks.len() as u64) as usize]
    }

    /// Logical bytes (keys + values) of block `h`'s records in `stores`.
    pub fn block_bytes_in(&self, stores: &[Store], h: u64) -> u64 {
        self.sample(h)
            .iter()
            .filter(|o| stores.contains(&o.store))
            .map(|o| u64::from(o.key_len) + u64::from(o.value_len))
            .sum()
    }

    /// Logical bytes of blocks `1..=n`'s records in `stores`.
    pub fn logical_bytes_in(&self, stores: &[Store], n: u64) -> u64 {
        let cycle = self.blocks.len() as u64;
        let per_cycle: u64 = (1..=cycle).map(|h| self.block_bytes_in(stores, h)).sum();
        let full = n / cycle;
        full * per_cycle
            + (1..=n % cycle)
                .map(|h| self.block_bytes_in(stores, h))
                .sum::<u64>()
    }

    /// Per-store averages over the cycle.
    pub fn summary(&self) -> [StoreSummary; 3] {
        let mut s = [StoreSummary::default(); 3];
        for ops in &self.blocks {
            for o in ops {
                let x = &mut s[o.store.index()];
                x.ops += 1.0;
                x.key_bytes += f64::from(o.key_len);
                x.value_bytes += f64::from(o.value_len);
            }
        }
        let n = self.blocks.len() as f64;
        for x in &mut s {
            x.ops /= n;
            x.key_bytes /= n;
            x.value_bytes /= n;
        }
        s
    }

    /// Peer block `h`: keys built per [`KeyKind`], values sliced from `pool`.
    pub fn peer_block<'p>(&self, h: u64, pool: &'p [u8]) -> Vec<PeerOp<'p>> {
        self.sample(h)
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let r = splitmix64(h.wrapping_mul(0x1_0000) ^ i as u64);
                let key = match &o.kind {
                    KeyKind::Fixed(k) => k.clone(),
                    KeyKind::Seq => {
                        let mut k = Vec::with_capacity(o.key_len as usize);
                        k.push(i as u8);
                        k.extend_from_slice(&h.to_be_bytes());
                        k.resize(o.key_len as usize, 0);
                        k
                    }
                    KeyKind::Random => {
                        let mut k = Vec::with_capacity(o.key_len as usize + 8);
                        let mut x = r % APP_KEY_SPACE;
                        while k.len() < o.key_len as usize {
                            x = splitmix64(x);
                            k.extend_from_slice(&x.to_be_bytes());
                        }
                        k.truncate(o.key_len as usize);
                        k
                    }
                };
                let value = (!o.delete).then(|| {
                    let len = o.value_len as usize;
                    let off = (splitmix64(r) as usize) % (pool.len() - len);
                    &pool[off..off + len]
                });
                PeerOp {
                    store: o.store,
                    key,
                    value,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded() -> Vec<Vec<RecordedOp>> {
        (1..=3u64)
            .map(|h| {
                vec![
                    (Store::Blocks, b"desc".to_vec(), Some(32)),
                    (
                        Store::Blocks,
                        [&[1u8][..], &h.to_be_bytes()].concat(),
                        Some(300),
                    ),
                    (Store::App, vec![h as u8; 33], Some(100)),
                    (Store::App, vec![0xF0 | h as u8; 33], None),
                ]
            })
            .collect()
    }

    #[test]
    fn rewritten_keys_are_fixed_and_others_seq_or_random() {
        let s = Shape::from_recorded("light", &recorded());
        let b = &s.blocks[0];
        assert_eq!(b[0].kind, KeyKind::Fixed(b"desc".to_vec()));
        assert_eq!(b[1].kind, KeyKind::Seq);
        assert_eq!(b[2].kind, KeyKind::Random);
        assert!(b[3].delete && b[3].value_len == 0);
    }

    #[test]
    fn peer_blocks_have_the_measured_sizes_and_distinct_seq_keys() {
        let s = Shape::from_recorded("light", &recorded());
        let pool = vec![7u8; 4096];
        for h in 1..=7 {
            let b = s.peer_block(h, &pool);
            let sample = s.sample(h);
            assert_eq!(b.len(), sample.len());
            for (p, o) in b.iter().zip(sample) {
                assert_eq!(p.key.len(), o.key_len as usize);
                assert_eq!(p.value.map_or(0, |v| v.len()), o.value_len as usize);
            }
        }
        assert_ne!(s.peer_block(1, &pool)[1].key, s.peer_block(2, &pool)[1].key);
        let all = &Store::ALL;
        assert_eq!(s.block_bytes_in(all, 1), 4 + 32 + 9 + 300 + 33 + 100 + 33);
        assert_eq!(s.logical_bytes_in(all, 7), 7 * s.block_bytes_in(all, 1));
    }

    /// The block store's records alone (what `save_block` writes and `raw-sync-blocks`
    /// appends), counted by hand from `recorded()`; the app's would make it 166 B more.
    #[test]
    fn the_block_stores_bytes_leave_the_other_stores_out() {
        let s = Shape::from_recorded("light", &recorded());
        assert_eq!(s.block_bytes_in(&[Store::Blocks], 1), 4 + 32 + 9 + 300);
        assert_eq!(s.block_bytes_in(&[Store::App], 1), 33 + 100 + 33);
        assert_eq!(s.logical_bytes_in(&[Store::Blocks], 7), 7 * 345);
        assert_eq!(s.logical_bytes_in(&[Store::State], 7), 0);
    }
}
