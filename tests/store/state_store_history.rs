//! The state store keeps the consensus state, per-height results, and the validator-set and
//! params history: a history entry holds the value where it changed, at the chain's first
//! height and at every `HISTORY_CHECKPOINT_INTERVAL`; elsewhere it points back, and a load
//! walks back one step. `State::next` puts validator and param updates of block h in force
//! at h + 1.
//!
//! Expected values come from this file's own model of the updates (a `BTreeMap` of powers),
//! not from `ValidatorSet::apply_updates`.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flushpoint::codec::{RecordKind, decode_record, keys};
use flushpoint::demo::DemoHistory;
use flushpoint::demo::{BlockResults, ConsensusParams, State, TxResult, Validator, ValidatorSet};
use flushpoint::store::{HISTORY_CHECKPOINT_INTERVAL, StateStore};
use flushpoint::{Batch, CorruptReason, Db, Durability, Error, MemoryDb};
use support::{Saved, block_at};

fn addr(i: u8) -> [u8; 32] {
    [i; 32]
}

fn genesis_validators() -> BTreeMap<[u8; 32], u64> {
    (1..=4).map(|i| (addr(i), 10 * u64::from(i))).collect()
}

fn set_of(m: &BTreeMap<[u8; 32], u64>) -> ValidatorSet {
    ValidatorSet {
        validators: m
            .iter()
            .map(|(a, p)| Validator {
                address: *a,
                power: *p,
            })
            .collect(),
    }
}

/// The updates a block at `h` carries, on a fixed schedule.
fn validator_updates(h: u64) -> Vec<Validator> {
    if h.is_multiple_of(377) || h == 3 {
        vec![
            // change a power, add one, remove one
            Validator {
                address: addr(1),
                power: h,
            },
            Validator {
                address: addr((h % 200) as u8 + 10),
                power: 5,
            },
            Validator {
                address: addr(2),
                power: 0,
            },
        ]
    } else {
        Vec::new()
    }
}

fn param_updates(h: u64) -> Option<ConsensusParams> {
    (h.is_multiple_of(611) || h == 5).then(|| ConsensusParams {
        block_max_bytes: 1_000_000 + h,
        block_max_gas: h,
        evidence_max_age_blocks: 7,
    })
}

fn results(h: u64) -> BlockResults {
    BlockResults {
        tx_results: vec![TxResult {
            code: (h % 3) as u32,
            data: Bytes::from(h.to_be_bytes().to_vec()),
        }],
        validator_updates: validator_updates(h),
        param_updates: param_updates(h),
    }
}

/// What the model says is in force at each height from `initial` to `last + 1`.
struct Expected {
    validators: BTreeMap<u64, (u64, ValidatorSet)>,
    params: BTreeMap<u64, (u64, ConsensusParams)>,
}

/// Runs a chain from `initial` through `last`, saving results and state after every block,
/// and returns the store, the final state and the model's expectations.
fn run_chain(
    initial: u64,
    last: u64,
) -> (
    StateStore<flushpoint::demo::DemoChain>,
    Arc<MemoryDb>,
    State,
    Expected,
    Vec<Saved>,
) {
    let mem = Arc::new(MemoryDb::new("state"));
    let store = StateStore::<flushpoint::demo::DemoChain>::open(mem.clone());
    let mut powers = genesis_validators();
    let mut params = ConsensusParams::default();
    let (mut vals_changed, mut params_changed) = (initial, initial);
    let mut state = State::genesis(initial, set_of(&powers), params.clone(), [0; 32]);
    store.save_state(&state).unwrap();
    let mut expected = Expected {
        validators: BTreeMap::new(),
        params: BTreeMap::new(),
    };
    expected
        .validators
        .insert(initial, (vals_changed, set_of(&powers)));
    expected
        .params
        .insert(initial, (params_changed, params.clone()));
    let mut prev = [0; 32];
    let mut blocks = Vec::new();
    for h in initial..=last {
        let block = block_at(h, prev, vec![Bytes::from(h.to_be_bytes().to_vec())]);
        prev = block.hash();
        let r = results(h);
        store.save_results(h, &r).unwrap();
        state = state.next(&block.block, &r, [(h % 251) as u8; 32]);
        store.save_state(&state).unwrap();
        // The model: updates of block h are in force from h + 1.
        for u in &r.validator_updates {
            if u.power == 0 {
                powers.remove(&u.address);
            } else {
                powers.insert(u.address, u.power);
            }
        }
        if !r.validator_updates.is_empty() {
            vals_changed = h + 1;
        }
        if let Some(p) = &r.param_updates {
            params = p.clone();
            params_changed = h + 1;
        }
        expected
            .validators
            .insert(h + 1, (vals_changed, set_of(&powers)));
        expected
            .params
            .insert(h + 1, (params_changed, params.clone()));
        blocks.push(block);
    }
    (store, mem, state, expected, blocks)
}

/// The stored entry's (changed_at, holds a value) at `key`, read from the raw record.
fn raw_entry(db: &dyn Db, key: &[u8], kind: RecordKind) -> Option<(u64, bool)> {
    let v = db.get(key).unwrap()?;
    let payload = decode_record(key, kind, &v).unwrap();
    let changed_at = u64::from_be_bytes(payload[..8].try_into().unwrap());
    Some((changed_at, payload[8] == 1))
}

#[test]
fn state_saves_and_loads_and_empty_store_has_none() {
    let store = StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::new("state")));
    assert_eq!(store.load_state().unwrap(), None);
    assert_eq!(store.height().unwrap(), 0);
    let (store, _, state, _, _) = run_chain(1, 12);
    assert_eq!(store.load_state().unwrap().as_ref(), Some(&state));
    assert_eq!(store.height().unwrap(), 12);
    assert_eq!(state.last_block_height, 12);
}

#[test]
fn results_are_kept_per_height() {
    let (store, _, _, _, _) = run_chain(1, 30);
    for h in 1..=30 {
        assert_eq!(
            store.load_results(h).unwrap(),
            Some(results(h)),
            "height {h}"
        );
    }
    assert_eq!(store.load_results(0).unwrap(), None);
    assert_eq!(store.load_results(31).unwrap(), None);
}

#[test]
fn history_loads_the_value_in_force_at_every_height_across_checkpoints() {
    let last = 2 * HISTORY_CHECKPOINT_INTERVAL + 150;
    let (store, _, _, expected, _) = run_chain(1, last);
    // The schedule makes both values change, and stay unchanged across checkpoints.
    let distinct_sets = expected
        .validators
        .values()
        .map(|(c, _)| *c)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(distinct_sets.len() >= 6, "{distinct_sets:?}");
    for (h, want) in &expected.validators {
        assert_eq!(
            store.load_validators(*h).unwrap().as_ref(),
            Some(want),
            "validators at {h}"
        );
    }
    for (h, want) in &expected.params {
        assert_eq!(
            store.load_consensus_params(*h).unwrap().as_ref(),
            Some(want),
            "params at {h}"
        );
    }
    // Beyond the next height nothing is stored yet.
    assert_eq!(store.load_validators(last + 2).unwrap(), None);
    assert_eq!(store.load_consensus_params(0).unwrap(), None);
}

#[test]
fn history_stores_values_only_at_changes_first_height_and_checkpoints() {
    for initial in [1, 995] {
        let last = initial + 2 * HISTORY_CHECKPOINT_INTERVAL + 20;
        let (_, mem, _, expected, _) = run_chain(initial, last);
        let (mut full, mut pointers) = (0, 0);
        for (prefix, kind, changed) in [
            (
                keys::VALIDATORS,
                RecordKind::VALIDATORS_INFO,
                expected
                    .validators
                    .iter()
                    .map(|(h, (c, _))| (*h, *c))
                    .collect::<Vec<_>>(),
            ),
            (
                keys::PARAMS,
                RecordKind::PARAMS_INFO,
                expected.params.iter().map(|(h, (c, _))| (*h, *c)).collect(),
            ),
        ] {
            for (h, changed_at) in changed {
                let key = keys::height_key(prefix, h);
                let (stored_changed_at, has_value) =
                    raw_entry(&*mem, &key, kind).expect("an entry for every height");
                assert_eq!(stored_changed_at, changed_at, "{kind:?} at {h}");
                let must_hold = h == changed_at
                    || h == initial
                    || h.is_multiple_of(HISTORY_CHECKPOINT_INTERVAL);
                assert_eq!(has_value, must_hold, "{kind:?} at {h}");
                if has_value {
                    full += 1;
                } else {
                    pointers += 1;
                }
            }
        }
        // Most entries are pointers; values appear only where the rule puts them.
        assert!(
            pointers > 10 * full,
            "initial {initial}: {full} full, {pointers} pointers"
        );
    }
}

#[test]
fn history_load_walks_back_to_the_checkpoint_not_further() {
    let last = 2 * HISTORY_CHECKPOINT_INTERVAL + 50;
    let (store, mem, _, expected, _) = run_chain(1, last);
    // Find a stretch where validators last changed before a checkpoint and stay unchanged
    // past it: lookups past the checkpoint must read the checkpoint's entry.
    let cp = HISTORY_CHECKPOINT_INTERVAL;
    let (changed_at, _) = expected.validators[&(cp + 1)];
    assert!(changed_at < cp, "the schedule changes nothing at {cp}");
    let past = cp + 10;
    assert_eq!(expected.validators[&past].0, changed_at);
    // Remove the checkpoint's entry: the lookup past it is now a corruption report naming
    // the entry that points nowhere, while a lookup before the checkpoint still works.
    let mut batch = Batch::new();
    batch.delete(Bytes::copy_from_slice(&keys::height_key(
        keys::VALIDATORS,
        cp,
    )));
    mem.write(&batch, Durability::Synced).unwrap();
    match store.load_validators(past) {
        Err(Error::Corrupt {
            db,
            key,
            height,
            reason: CorruptReason::Invalid(_),
        }) => {
            assert_eq!(db, "state");
            assert_eq!(key, keys::height_key(keys::VALIDATORS, past).to_vec());
            assert_eq!(height, Some(past));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let before = cp - 1;
    assert_eq!(
        store.load_validators(before).unwrap().as_ref(),
        Some(&expected.validators[&before])
    );
}

#[test]
fn state_next_applies_updates_at_the_next_height() {
    let powers = genesis_validators();
    let genesis = State::genesis(1, set_of(&powers), ConsensusParams::default(), [7; 32]);
    assert_eq!(genesis.last_block_height, 0);
    let block = block_at(1, [0; 32], vec![Bytes::from_static(b"tx")]);
    let r = BlockResults {
        tx_results: vec![],
        validator_updates: vec![
            Validator {
                address: addr(3),
                power: 0,
            },
            Validator {
                address: addr(9),
                power: 90,
            },
        ],
        param_updates: Some(ConsensusParams {
            block_max_bytes: 1,
            block_max_gas: 2,
            evidence_max_age_blocks: 3,
        }),
    };
    let s = genesis.next(&block.block, &r, [8; 32]);
    let mut want = powers.clone();
    want.remove(&addr(3));
    want.insert(addr(9), 90);
    assert_eq!(s.last_block_height, 1);
    assert_eq!(s.last_block_hash, block.hash());
    assert_eq!(s.last_block_time_ms, block.block.header.time_ms);
    assert_eq!(s.validators, set_of(&want));
    assert_eq!(s.last_validators, set_of(&powers));
    assert_eq!(s.last_height_validators_changed, 2);
    assert_eq!(s.consensus_params, r.param_updates.clone().unwrap());
    assert_eq!(s.last_height_params_changed, 2);
    assert_eq!(s.last_results_hash, r.hash());
    assert_eq!(s.app_hash, [8; 32]);
    // A block without updates changes neither value nor its change height.
    let block2 = block_at(2, block.hash(), vec![]);
    let s2 = s.next(&block2.block, &BlockResults::default(), [9; 32]);
    assert_eq!(s2.validators, s.validators);
    assert_eq!(s2.last_validators, s.validators);
    assert_eq!(s2.last_height_validators_changed, 2);
    assert_eq!(s2.last_height_params_changed, 2);
    // Saved, the store answers with the old set at 1 and the new one from 2.
    let store = StateStore::<flushpoint::demo::DemoChain>::open(Arc::new(MemoryDb::new("state")));
    store.save_state(&genesis).unwrap();
    store.save_state(&s).unwrap();
    store.save_state(&s2).unwrap();
    assert_eq!(
        store.load_validators(1).unwrap(),
        Some((1, set_of(&powers)))
    );
    assert_eq!(store.load_validators(2).unwrap(), Some((2, set_of(&want))));
    assert_eq!(store.load_validators(3).unwrap(), Some((2, set_of(&want))));
    assert_eq!(
        store.load_consensus_params(1).unwrap(),
        Some((1, ConsensusParams::default()))
    );
    assert_eq!(
        store.load_consensus_params(3).unwrap(),
        Some((2, r.param_updates.unwrap()))
    );
}

#[test]
fn rollback_removes_history_and_results_above_and_restores_state() {
    let (store, mem, _, expected, blocks) = run_chain(1, 40);
    // Rebuild the state at 20 (the store keeps only the latest one).
    let mut state = State::genesis(
        1,
        set_of(&genesis_validators()),
        ConsensusParams::default(),
        [0; 32],
    );
    for b in &blocks[..20] {
        let h = b.height();
        state = state.next(&b.block, &results(h), [(h % 251) as u8; 32]);
    }
    store.rollback_to(&state, 40).unwrap();
    assert_eq!(store.load_state().unwrap().as_ref(), Some(&state));
    for h in 21..=40 {
        assert_eq!(store.load_results(h).unwrap(), None, "results {h}");
    }
    for h in 22..=41 {
        assert_eq!(store.load_validators(h).unwrap(), None, "validators {h}");
        assert_eq!(store.load_consensus_params(h).unwrap(), None, "params {h}");
    }
    for h in 1..=21 {
        assert_eq!(
            store.load_validators(h).unwrap().as_ref(),
            Some(&expected.validators[&h])
        );
    }
    assert_eq!(store.load_results(20).unwrap(), Some(results(20)));
    // No key of the state store names a height above 21.
    let all = flushpoint::db::collect_range(
        &*mem,
        flushpoint::KeyRange::all(),
        flushpoint::Direction::Forward,
    )
    .unwrap();
    for (k, _) in all {
        assert!(
            keys::height_of(&k).is_none_or(|h| h <= 21),
            "{}",
            flushpoint::codec::hex(&k)
        );
    }
}
