//! A deterministic synthetic chain: block h is a pure function of the seed, h and the state
//! after h − 1, so an interrupted sync resumed from its own state produces the same chain.
//!
//! Profiles: `light` ≈ 4 KiB of transactions per block; `heavy` ≈ 1 MiB in 64 KiB parts;
//! `mixed`, one heavy block in ten. Validator-set changes, consensus-params changes and empty
//! blocks come at fixed periods (see [`ChainSpec`]).
//!
//! Invariant: nothing here reads a clock or a random source: every byte of a block comes
//! from the seed, the profile, the height and the state.

use bytes::{BufMut, Bytes, BytesMut};

use super::chain::{DemoChain, Genesis};
use super::kv::Tx;
use super::types::{
    Block, Commit, ConsensusParams, Header, State, Validator, ValidatorSet, sha256,
};
use crate::rng::splitmix64;
use crate::types::PartSet;

/// Block size profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum Profile {
    /// ≈ 4 KiB of transactions per block.
    Light,
    /// ≈ 1 MiB per block (16 parts).
    Heavy,
    /// Light, with one heavy block in ten.
    Mixed,
    /// Account updates: each block reads and rewrites 64 values ([`Tx::Add`]) scattered
    /// over the key space — the reads prefetch warms.
    Accounts,
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "light" => Ok(Profile::Light),
            "heavy" => Ok(Profile::Heavy),
            "mixed" => Ok(Profile::Mixed),
            "accounts" => Ok(Profile::Accounts),
            _ => Err(format!(
                "unknown profile {s:?}: use light, heavy, mixed or accounts"
            )),
        }
    }
}

/// The chain's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainSpec {
    /// The seed.
    pub seed: u64,
    /// Block sizes.
    pub profile: Profile,
    /// The first height.
    pub initial_height: u64,
    /// A validator-set change every this many blocks (0: never).
    pub validator_change_every: u64,
    /// A consensus-params change every this many blocks (0: never).
    pub params_change_every: u64,
    /// An empty block every this many blocks (0: never).
    pub empty_every: u64,
    /// Distinct keys the accounts profile's adds touch (few: consecutive blocks read what
    /// the one before wrote).
    pub account_keys: u64,
}

impl ChainSpec {
    /// The default shape for `seed` and `profile`.
    pub fn new(seed: u64, profile: Profile) -> Self {
        ChainSpec {
            seed,
            profile,
            initial_height: 1,
            validator_change_every: 50,
            params_change_every: 200,
            empty_every: 13,
            account_keys: KEY_SPACE,
        }
    }
}

/// Light-block transaction count and value size: 24 × ~170 B ≈ 4 KiB.
const LIGHT_TXS: u64 = 24;
const LIGHT_VALUE_BYTES: usize = 128;
/// Heavy blocks: 16 values of just under 64 KiB ≈ 1 MiB.
const HEAVY_TXS: u64 = 16;
const HEAVY_VALUE_BYTES: usize = 64 * 1024 - 64;
/// Distinct app keys: some writes overwrite, as on a real chain.
const KEY_SPACE: u64 = 1 << 20;
/// Account-update transactions per block of the accounts profile.
const ACCOUNT_TXS: u64 = 64;

/// The app key of key number `n` (scattered: a hash).
pub fn account_key(n: u64) -> Bytes {
    Bytes::copy_from_slice(&sha256(&(n % KEY_SPACE).to_be_bytes()))
}

impl ChainSpec {
    /// The genesis of this chain.
    pub fn genesis(&self) -> Genesis {
        let validators = (0..4)
            .map(|i| Validator {
                address: sha256(&[self.seed.to_be_bytes(), (i as u64).to_be_bytes()].concat()),
                power: 10,
            })
            .collect();
        Genesis {
            initial_height: self.initial_height,
            validators: ValidatorSet::new(validators),
            consensus_params: ConsensusParams::default(),
        }
    }

    /// The demo chain of this spec (its genesis and header rules), for [`crate::Node::open`].
    pub fn chain(&self) -> DemoChain {
        DemoChain::new(self.genesis())
    }

    fn every(n: u64, h: u64) -> bool {
        n != 0 && h.is_multiple_of(n)
    }

    fn rand(&self, h: u64, j: u64) -> u64 {
        splitmix64(self.seed ^ splitmix64(h.wrapping_mul(1_000_003) ^ j))
    }

    fn fill(&self, h: u64, j: u64, len: usize) -> Bytes {
        let mut b = BytesMut::with_capacity(len);
        let mut x = self.rand(h, j ^ 0xfeed);
        while b.len() + 8 <= len {
            x = splitmix64(x);
            b.put_u64(x);
        }
        while b.len() < len {
            b.put_u8(x as u8);
        }
        b.freeze()
    }

    /// The transactions of block `h`.
    pub fn txs(&self, h: u64) -> Vec<Bytes> {
        if Self::every(self.empty_every, h) {
            return Vec::new();
        }
        let heavy = match self.profile {
            Profile::Light => false,
            Profile::Heavy => true,
            Profile::Mixed => h.is_multiple_of(10),
            Profile::Accounts => {
                return (0..ACCOUNT_TXS)
                    .map(|j| {
                        let r = self.rand(h, j);
                        Tx::Add(account_key(r % self.account_keys.max(1)), (r >> 40) % 1_000)
                            .encode()
                    })
                    .chain(self.param_txs(h))
                    .collect();
            }
        };
        let (n, len) = if heavy {
            (HEAVY_TXS, HEAVY_VALUE_BYTES)
        } else {
            (LIGHT_TXS, LIGHT_VALUE_BYTES)
        };
        let mut txs = Vec::with_capacity(n as usize + 2);
        for j in 0..n {
            let r = self.rand(h, j);
            let key = account_key(r);
            let tx = if r.is_multiple_of(17) {
                Tx::Delete(key)
            } else {
                Tx::Set(key, self.fill(h, j, len))
            };
            txs.push(tx.encode());
        }
        txs.extend(self.param_txs(h));
        txs
    }

    /// The validator-set and params changes block `h` carries.
    fn param_txs(&self, h: u64) -> Vec<Bytes> {
        let mut txs = Vec::new();
        if Self::every(self.validator_change_every, h) {
            let i = (h / self.validator_change_every.max(1)) % 6;
            txs.push(
                Tx::Validator(Validator {
                    address: sha256(&[self.seed.to_be_bytes(), i.to_be_bytes()].concat()),
                    power: 5 + h % 20,
                })
                .encode(),
            );
        }
        if Self::every(self.params_change_every, h) {
            txs.push(
                Tx::Params(ConsensusParams {
                    block_max_bytes: 22 * 1024 * 1024 + h,
                    ..ConsensusParams::default()
                })
                .encode(),
            );
        }
        txs
    }

    /// Block `h` as far as it is known before block `h − 1` is applied: its height and
    /// transactions (a pure function of the seed and `h`), the header otherwise empty. What
    /// [`crate::Node::prefetch_next`] needs from the demo chain (the app reads only the
    /// transactions); never a block to apply.
    pub fn preview(&self, h: u64) -> Block {
        Block {
            header: Header {
                height: h,
                ..Header::default()
            },
            txs: self.txs(h),
            last_commit: Commit::default(),
        }
    }

    /// Block `state.last_block_height + 1`, its part set and its seen commit, built on
    /// `state` (the state after the previous block).
    pub fn next_block(&self, state: &State) -> (Block, PartSet, Commit) {
        self.next_block_with(state, self.txs(state.last_block_height + 1))
    }

    /// [`ChainSpec::next_block`] with its transactions given: those of a
    /// [`ChainSpec::preview`] of the same height, so a loop that prefetches does not build
    /// every block's transactions twice.
    pub fn next_block_with(&self, state: &State, txs: Vec<Bytes>) -> (Block, PartSet, Commit) {
        let h = state.last_block_height + 1;
        debug_assert_eq!(txs, self.txs(h), "invariant: the transactions of block {h}");
        let header = Header {
            height: h,
            time_ms: 1_700_000_000_000 + h * 1_000,
            last_block_hash: state.last_block_hash,
            data_hash: Block::data_hash_of(&txs),
            validators_hash: state.validators.hash(),
            consensus_params_hash: state.consensus_params.hash(),
            app_hash: state.app_hash,
            last_results_hash: state.last_results_hash,
        };
        let sigs = |height: u64, hash: &[u8; 32]| -> Vec<Bytes> {
            (0..4u64)
                .map(|i| {
                    Bytes::copy_from_slice(&sha256(
                        &[&height.to_be_bytes()[..], hash, &i.to_be_bytes()].concat(),
                    ))
                })
                .collect()
        };
        let last_commit = Commit {
            height: h - 1,
            round: 0,
            block_hash: state.last_block_hash,
            signatures: if h > state.initial_height {
                sigs(h - 1, &state.last_block_hash)
            } else {
                Vec::new()
            },
        };
        let block = Block {
            header,
            txs,
            last_commit,
        };
        let hash = block.hash();
        let seen = Commit {
            height: h,
            round: 0,
            block_hash: hash,
            signatures: sigs(h, &hash),
        };
        let parts = PartSet::from_block(&block);
        (block, parts, seen)
    }
}
