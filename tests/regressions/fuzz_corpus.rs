//! Property: every stored fuzz input passes its target's check — the same function the
//! cargo-fuzz target calls (`flushpoint_fuzz::run_target`, included from
//! `fuzz/src/lib.rs`), so CI replays the corpus of every target without cargo-fuzz or
//! libFuzzer. And: the stored corpora reach both the accepting and the rejecting paths of
//! each decoder, fresh seed records from a real chain pass every check, and the record
//! check rejects a codec that is not canonical.
//!
//! Corpus: `tests/fuzz_corpus/<target>/`, one file per input: the seeds below, grown by
//! `scripts/fuzz.sh` and merged back minimized with `FUZZ_STORE=1 scripts/fuzz.sh`. A
//! crasher found by a fuzz run is added there by hand.
//! `FLUSHPOINT_FUZZ_SEEDS_OUT=<dir>` writes the generated seeds to `<dir>/<target>/` (the
//! starting corpus of a fresh fuzz run).

#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
mod fuzz_checks;
use crate::support;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arbitrary::{Arbitrary, Unstructured};
use flushpoint::codec::RecordKind;
use flushpoint::db::collect_range;
use flushpoint::demo::{
    Block, BlockResults, ChainSpec, Commit, ConsensusParams, KvApp, Profile, State,
    TypedHistoryEntry, ValidatorSet,
};
use flushpoint::records::{
    BlockMeta, BlockStoreState, FlushRecord, HeightValue, Record, decode, encode,
};
use flushpoint::{
    CorruptReason, Direction, FlushPolicy, HoldingDb, KeyRange, MemoryDb, NoEvents, Node,
};
use fuzz_checks::{KEY, TARGETS, run_target};
use support::Rng;

/// Named stored inputs (file name, bytes).
type Inputs = [(String, Vec<u8>)];
/// Counts (accepted, rejected) inputs of one decoder.
type Reach = fn(&Inputs) -> (usize, usize);
/// Stored key–value pairs.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Fewest stored inputs per target: below this the corpus is not a regression suite.
const CORPUS_INPUTS_MIN: usize = 10;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn names_in(dir: &Path, strip_rs: bool) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter_map(|n| {
            if strip_rs {
                n.strip_suffix(".rs").map(str::to_string)
            } else {
                Some(n)
            }
        })
        .collect();
    v.sort();
    v
}

/// The stored inputs of `target`, sorted by file name.
fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = root().join("tests/fuzz_corpus").join(target);
    names_in(&dir, false)
        .into_iter()
        .map(|n| {
            let data = std::fs::read(dir.join(&n)).expect("read corpus file");
            (n, data)
        })
        .collect()
}

/// Runs `check` on `data`; `Err` holds the panic message.
fn try_check(check: impl FnOnce()) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(check)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "non-string panic".into())
    })
}

#[test]
fn every_fuzz_target_has_a_stored_corpus() {
    let mut targets: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    targets.sort();
    assert_eq!(
        names_in(&root().join("fuzz/fuzz_targets"), true),
        targets,
        "fuzz_targets/*.rs and flushpoint_fuzz::TARGETS name the same targets"
    );
    assert_eq!(
        names_in(&root().join("tests/fuzz_corpus"), false),
        targets,
        "one corpus directory per target"
    );
    for t in &targets {
        let n = corpus(t).len();
        assert!(
            n >= CORPUS_INPUTS_MIN,
            "{t}: {n} stored inputs, fewer than {CORPUS_INPUTS_MIN}"
        );
    }
}

#[test]
fn stored_fuzz_corpus_replays_without_a_failure() {
    let t0 = Instant::now();
    let mut total = 0;
    let mut failures = Vec::new();
    for (name, _) in TARGETS {
        let inputs = corpus(name);
        for (file, data) in &inputs {
            if let Err(e) = try_check(|| run_target(name, data)) {
                failures.push(format!("{name}/{file}: {e}"));
            }
        }
        println!("{name}: {} inputs replayed", inputs.len());
        total += inputs.len();
    }
    println!(
        "{total} stored inputs over {} targets, {} failures, {:.2} s",
        TARGETS.len(),
        failures.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// (accepted, rejected) payloads of `T` among `inputs`.
fn accepted_rejected<T: Record>(inputs: &Inputs) -> (usize, usize) {
    let ok = inputs
        .iter()
        .filter(|(_, d)| T::from_payload(d).is_ok())
        .count();
    (ok, inputs.len() - ok)
}

/// The corpora are not all garbage: each decoder's corpus holds inputs it accepts (so the
/// round-trip assertions run) and inputs it rejects (so the error paths run); each
/// `holding_ops` input count is reported with the ops it decodes to.
#[test]
fn stored_corpora_reach_accepting_and_rejecting_paths() {
    let reach: [(&str, Reach); 10] = [
        ("decode_block", |c| {
            let ok = c.iter().filter(|(_, d)| Block::decode(d).is_ok()).count();
            (ok, c.len() - ok)
        }),
        ("decode_block_meta", accepted_rejected::<BlockMeta>),
        ("decode_block_results", accepted_rejected::<BlockResults>),
        (
            "decode_block_store_state",
            accepted_rejected::<BlockStoreState>,
        ),
        ("decode_commit", accepted_rejected::<Commit>),
        ("decode_flush_record", accepted_rejected::<FlushRecord>),
        ("decode_hash_index", accepted_rejected::<HeightValue>),
        (
            "decode_params_info",
            accepted_rejected::<TypedHistoryEntry<ConsensusParams>>,
        ),
        ("decode_state", accepted_rejected::<State>),
        (
            "decode_validators_info",
            accepted_rejected::<TypedHistoryEntry<ValidatorSet>>,
        ),
    ];
    for (name, f) in reach {
        let (ok, bad) = f(&corpus(name));
        println!("{name}: {ok} inputs decode, {bad} are rejected");
        assert!(ok > 0, "{name}: no stored input decodes");
        assert!(bad > 0, "{name}: no stored input is rejected");
    }
    let ops: Vec<usize> = corpus("holding_ops")
        .iter()
        .filter_map(|(_, d)| {
            fuzz_checks::holding::Input::arbitrary_take_rest(Unstructured::new(d))
                .ok()
                .map(|i| i.ops.len())
        })
        .collect();
    println!(
        "holding_ops: {} inputs decode to op sequences, {} ops in all, longest {}",
        ops.len(),
        ops.iter().sum::<usize>(),
        ops.iter().max().unwrap_or(&0)
    );
    assert!(ops.iter().any(|&n| n >= 5), "no holding_ops input of 5 ops");
}

/// Builds a real chain (block sync with flush points, then consensus, validator and params
/// changes) over memory databases; returns every stored value and the blocks.
fn real_chain() -> (Entries, Vec<Block>) {
    let mut spec = ChainSpec::new(7, Profile::Light);
    spec.validator_change_every = 4;
    spec.params_change_every = 5;
    spec.empty_every = 3;
    let bs = Arc::new(MemoryDb::new("block-store"));
    let st = Arc::new(MemoryDb::new("state"));
    let app_db = Arc::new(MemoryDb::new("app"));
    let app = KvApp::open(Arc::new(HoldingDb::new(app_db.clone()))).expect("open app");
    let (mut node, _) = Node::open(
        bs.clone(),
        st.clone(),
        Box::new(app),
        spec.chain(),
        Box::new(NoEvents),
    )
    .expect("open node");
    let policy = FlushPolicy::default().with_window_blocks_max(Some(4));
    let now = Instant::now();
    node.start_block_sync(policy, now).expect("block sync");
    let mut blocks = Vec::new();
    for _ in 0..10 {
        let (b, parts, c) = spec.next_block(node.state());
        node.sync_block(&b, &parts, &c, now).expect("sync block");
        blocks.push(b);
    }
    node.switch_to_consensus(now).expect("switch");
    node.set_per_block_mode(flushpoint::Mode::Consensus)
        .expect("consensus");
    for _ in 0..4 {
        let (b, parts, c) = spec.next_block(node.state());
        node.commit_block(&b, &parts, &c).expect("commit block");
        blocks.push(b);
    }
    node.stop(now).expect("stop");
    let mut values = Vec::new();
    for db in [&bs, &st, &app_db] {
        for (k, v) in collect_range(&**db, KeyRange::all(), Direction::Forward).expect("range") {
            values.push((k.to_vec(), v.to_vec()));
        }
    }
    (values, blocks)
}

/// A valid payload and its broken variants: truncated, one trailing byte, first byte
/// flipped, and the framed value under the fuzz key.
fn variants(payload: &[u8], framed: Option<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut v = vec![payload.to_vec()];
    if !payload.is_empty() {
        v.push(payload[..payload.len() - 1].to_vec());
        let mut f = payload.to_vec();
        f[0] ^= 0xff;
        v.push(f);
    }
    let mut t = payload.to_vec();
    t.push(0);
    v.push(t);
    v.extend(framed);
    v
}

fn seeds_of<T: Record>(values: &[(Vec<u8>, Vec<u8>)], out: &mut Vec<Vec<u8>>) {
    let mut n = 0;
    for (k, v) in values {
        if let Ok(r) = decode::<T>(k, v) {
            out.extend(variants(&r.to_payload(), Some(encode(KEY, &r).to_vec())));
            n += 1;
            if n == 4 {
                break;
            }
        }
    }
}

/// Seeds per target, from a real chain (records and blocks) and a seeded byte stream
/// (`holding_ops`).
fn seeds() -> BTreeMap<&'static str, Vec<Vec<u8>>> {
    let (values, blocks) = real_chain();
    let mut m: BTreeMap<&'static str, Vec<Vec<u8>>> = BTreeMap::new();
    for b in blocks.iter().take(4) {
        m.entry("decode_block")
            .or_default()
            .extend(variants(&b.encode(), None));
    }
    seeds_of::<BlockMeta>(&values, m.entry("decode_block_meta").or_default());
    seeds_of::<BlockResults>(&values, m.entry("decode_block_results").or_default());
    seeds_of::<BlockStoreState>(&values, m.entry("decode_block_store_state").or_default());
    seeds_of::<Commit>(&values, m.entry("decode_commit").or_default());
    seeds_of::<FlushRecord>(&values, m.entry("decode_flush_record").or_default());
    seeds_of::<HeightValue>(&values, m.entry("decode_hash_index").or_default());
    seeds_of::<TypedHistoryEntry<ConsensusParams>>(
        &values,
        m.entry("decode_params_info").or_default(),
    );
    seeds_of::<State>(&values, m.entry("decode_state").or_default());
    seeds_of::<TypedHistoryEntry<ValidatorSet>>(
        &values,
        m.entry("decode_validators_info").or_default(),
    );
    let mut rng = Rng(0x0f22_5eed);
    let holding = m.entry("holding_ops").or_default();
    for i in 0..24 {
        let len = 8 + (i * 11) % 200;
        holding.push((0..len).map(|_| rng.next_u64() as u8).collect());
    }
    m
}

/// Seeds from the current codec and a real chain pass every target's check (so the checks
/// accept correct records), and every target gets valid seeds.
#[test]
fn real_records_pass_every_fuzz_check() {
    let seeds = seeds();
    let out = std::env::var_os("FLUSHPOINT_FUZZ_SEEDS_OUT").map(PathBuf::from);
    for (name, _) in TARGETS {
        let inputs = seeds.get(name).map(Vec::as_slice).unwrap_or(&[]);
        assert!(
            inputs.len() >= 5,
            "{name}: the chain gave no record to seed it"
        );
        for (i, data) in inputs.iter().enumerate() {
            try_check(|| run_target(name, data)).unwrap_or_else(|e| panic!("{name} seed {i}: {e}"));
            if let Some(dir) = &out {
                let d = dir.join(name);
                std::fs::create_dir_all(&d).expect("create seed dir");
                std::fs::write(d.join(format!("seed-{i:03}")), data).expect("write seed");
            }
        }
        println!("{name}: {} seeds pass", inputs.len());
    }
}

/// A record whose codec is not canonical: it decodes a u64 and encodes it plus one.
#[derive(Debug, PartialEq)]
struct NotCanonical(u64);

impl Record for NotCanonical {
    const KIND: RecordKind = RecordKind::FLUSH_RECORD;
    fn encode_payload(&self, w: &mut flushpoint::codec::Writer) {
        w.u64(self.0.wrapping_add(1));
    }
    fn decode_payload(r: &mut flushpoint::codec::Reader<'_>) -> Result<Self, CorruptReason> {
        Ok(NotCanonical(r.u64()?))
    }
}

/// A record whose decoder panics on a payload it should reject.
#[derive(Debug, PartialEq)]
struct Panicky;

impl Record for Panicky {
    const KIND: RecordKind = RecordKind::FLUSH_RECORD;
    fn encode_payload(&self, _: &mut flushpoint::codec::Writer) {}
    fn decode_payload(r: &mut flushpoint::codec::Reader<'_>) -> Result<Self, CorruptReason> {
        let n = r.u64()?;
        assert!(n < 5, "a decoder that panics on bad input");
        Ok(Panicky)
    }
}

#[test]
fn record_check_rejects_a_broken_codec() {
    let input = 7u64.to_be_bytes();
    assert!(
        try_check(|| fuzz_checks::check_record::<NotCanonical>(&input)).is_err(),
        "check_record accepted a codec that does not round-trip"
    );
    assert!(
        try_check(|| fuzz_checks::check_record::<Panicky>(&input)).is_err(),
        "check_record accepted a decoder that panics"
    );
    // The same inputs through a correct codec pass.
    try_check(|| fuzz_checks::check_record::<HeightValue>(&input)).expect("HeightValue");
}
