//! [`verify`]: reads every record and part of a home and reports what is damaged and where.
//!
//! What it checks, in order (each failure is one [`Problem`]; the walk goes on after it):
//! 1. **Every entry of the three databases** is read through its engine — redb's pages,
//!    the journal's index, runs and value pointers (each pointer's crc). Every value of
//!    the block store and the state is a record: its length, checksum and version
//!    (ADR 0001); a key of no record family is reported.
//! 2. **The block store, height by height** from its base to its height: the meta, every
//!    part, the block decoded from its parts hashing to the meta's hash with a body its
//!    chain accepts, the seen commit, the canonical commit (stored with the next block,
//!    equal to the next block's last commit), the hash index pointing back at the height;
//!    and no record above the height.
//! 3. **The state**: the saved state, the genesis hash, each height's results and
//!    history from the state's base to its height.
//! 4. **Across the databases**: the handshake's classification of the heights and the
//!    flush record ([`classify`]) — a shape no crash leaves is a problem; a crash's shape
//!    the next start repairs is reported, not counted as damage.
//!
//! The home's open has already checked what it refuses (the `FORMAT`, the journal's index
//! against its segments, the segments' units, the runs' manifest); an open that fails is
//! the caller's one problem. Open the home with [`crate::Home::open_read_only`]: `verify`
//! writes nothing itself, and a read-only open writes nothing to the disk.

use std::sync::Arc;

use crate::app::App;
use crate::chain::{Chain, ChainBlock, ChainCommit, ChainState, HistorySlot};
use crate::codec::{check_frame, keys};
use crate::db::{Db, Direction, KeyRange};
use crate::error::{Error, ErrorKind};
use crate::home::Home;
use crate::node::{HandshakeCase, classify, observe};
use crate::store::{BlockStore, StateStore};

/// The most problems a report lists (the rest are counted). Why: a home damaged at every
/// height would otherwise list one line per record; the first thousand say where it is.
pub const VERIFY_PROBLEMS_MAX: usize = 1000;

/// One thing found damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Which database: `block store`, `state`, `app`, or `home` for what spans them.
    pub db: &'static str,
    /// What was being checked (`block meta`, `part 3`, `record frame`, …).
    pub check: String,
    /// The height involved, if any.
    pub height: Option<u64>,
    /// The error's kind ([`ErrorKind::Corrupt`] for damage the checks themselves found).
    pub kind: ErrorKind,
    /// What is wrong, naming the file, key or heights.
    pub detail: String,
}

/// Entries and records read, per database and in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyCounts {
    /// Entries read, per database (block store, state, app).
    pub entries: [u64; 3],
    /// Bytes of keys and values read, per database.
    pub bytes: [u64; 3],
    /// Blocks checked (meta, parts, decode, hash, commits, hash index).
    pub blocks: u64,
    /// Parts read.
    pub parts: u64,
    /// Heights of state results and history checked.
    pub state_heights: u64,
}

/// What [`verify`] found.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// What was read.
    pub counts: VerifyCounts,
    /// The first [`VERIFY_PROBLEMS_MAX`] problems, in the order found.
    pub problems: Vec<Problem>,
    /// Every problem found (at least `problems.len()`).
    pub problems_total: u64,
    /// The block store's base and height.
    pub block_store: (u64, u64),
    /// The state's height, the app's durable height.
    pub state_height: u64,
    /// The app's durable height.
    pub app_height: u64,
    /// The handshake's classification, when the heights have a shape a crash leaves (a
    /// repairable case is not damage: the next start repairs it).
    pub case: Option<HandshakeCase>,
}

impl VerifyReport {
    /// True when nothing is damaged.
    pub fn is_clean(&self) -> bool {
        self.problems_total == 0
    }
}

/// Collects problems, keeping the first [`VERIFY_PROBLEMS_MAX`].
struct Findings {
    report: VerifyReport,
}

impl Findings {
    fn add(&mut self, db: &'static str, check: impl Into<String>, height: Option<u64>, e: &Error) {
        self.push(Problem {
            db,
            check: check.into(),
            height,
            kind: e.kind(),
            detail: e.to_string(),
        });
    }

    fn damage(&mut self, db: &'static str, check: impl Into<String>, h: Option<u64>, d: String) {
        self.push(Problem {
            db,
            check: check.into(),
            height: h,
            kind: ErrorKind::Corrupt,
            detail: d,
        });
    }

    fn push(&mut self, p: Problem) {
        self.report.problems_total += 1;
        if self.report.problems.len() < VERIFY_PROBLEMS_MAX {
            self.report.problems.push(p);
        }
    }
}

const DB_NAMES: [&str; 3] = ["block store", "state", "app"];

/// Reads every record and part of `home` (see the module) with `app` over its app
/// database, and reports what is damaged. Never fails: every error is a [`Problem`].
pub fn verify<C: Chain>(home: &Home, app: &dyn App<C>) -> VerifyReport {
    let mut f = Findings {
        report: VerifyReport {
            counts: VerifyCounts::default(),
            problems: Vec::new(),
            problems_total: 0,
            block_store: (0, 0),
            state_height: 0,
            app_height: 0,
            case: None,
        },
    };
    let dbs: [&Arc<dyn Db>; 3] = [&home.block_store_db, &home.state_db, &home.app_db];
    for (i, db) in dbs.into_iter().enumerate() {
        read_every_entry(&mut f, i, &**db);
    }
    let bs = match BlockStore::<C::Block>::open(home.block_store_db.clone()) {
        Ok(bs) => bs,
        Err(e) => {
            f.add("block store", "block store state", None, &e);
            return f.report;
        }
    };
    let st = StateStore::<C>::open(home.state_db.clone());
    check_blocks(&mut f, &bs);
    check_state(&mut f, &st);
    match observe(&bs, &st, app) {
        Ok((_, o)) => {
            f.report.state_height = o.state_height;
            f.report.app_height = o.app_height;
            match classify(&o) {
                Ok(case) => f.report.case = Some(case),
                Err(why) => f.damage(
                    "home",
                    "heights",
                    None,
                    format!(
                        "{why}: block store {}, state {}, app {}, flush record {} — a shape \
                         no crash leaves",
                        o.block_store_height,
                        o.state_height,
                        o.app_height,
                        o.record.map_or("none".to_string(), |r| r.to_string())
                    ),
                ),
            }
        }
        Err(e) => f.add("home", "heights", None, &e),
    }
    f.report
}

/// Step 1: every entry of database `i`, and the record frame of each block store and state
/// value. An iterator error ends the database's walk (the engine cannot step past it).
fn read_every_entry(f: &mut Findings, i: usize, db: &dyn Db) {
    let name = DB_NAMES[i];
    let iter = match db.range(KeyRange::all(), Direction::Forward) {
        Ok(it) => it,
        Err(e) => return f.add(name, "read every entry", None, &e),
    };
    for item in iter {
        let (k, v) = match item {
            Ok(kv) => kv,
            Err(e) => return f.add(name, "read every entry", None, &e),
        };
        f.report.counts.entries[i] += 1;
        f.report.counts.bytes[i] += (k.len() + v.len()) as u64;
        if i == 2 {
            continue; // The app's values are the app's own encoding.
        }
        let known = if i == 0 {
            keys::BLOCK_STORE_PREFIXES.contains(&k[0])
        } else {
            keys::STATE_PREFIXES.contains(&k[0])
        };
        let height = keys::height_of(&k);
        if k.is_empty() || !known {
            f.damage(
                name,
                "record key",
                height,
                format!("key {} belongs to no record family", crate::error::hex(&k)),
            );
        } else if let Err(reason) = check_frame(&k, &v) {
            let e = Error::Corrupt {
                db: name.to_string(),
                key: k.to_vec(),
                height,
                reason,
            };
            f.add(name, "record frame", height, &e);
        }
    }
}

/// Step 2: the block store from its base to its height.
fn check_blocks<B: ChainBlock>(f: &mut Findings, bs: &BlockStore<B>) {
    let (base, top) = (bs.base(), bs.height());
    f.report.block_store = (base, top);
    let db = "block store";
    if top == 0 {
        return;
    }
    for h in base.max(1)..=top {
        f.report.counts.blocks += 1;
        let meta = match bs.load_block_meta(h) {
            Ok(Some(m)) => m,
            Ok(None) => {
                f.damage(
                    db,
                    "block meta",
                    Some(h),
                    format!("block {h}'s meta is missing"),
                );
                continue;
            }
            Err(e) => {
                f.add(db, "block meta", Some(h), &e);
                continue;
            }
        };
        for i in 0..meta.part_count {
            f.report.counts.parts += 1;
            match bs.load_block_part(h, i) {
                Ok(Some(_)) => {}
                Ok(None) => f.damage(
                    db,
                    format!("part {i}"),
                    Some(h),
                    format!("block {h}'s part {i} of {} is missing", meta.part_count),
                ),
                Err(e) => f.add(db, format!("part {i}"), Some(h), &e),
            }
        }
        // Decoded from its parts, hashing to the meta's hash, its body accepted.
        let block = match bs.load_block(h) {
            Ok(b) => b,
            Err(e) => {
                f.add(db, "block", Some(h), &e);
                None
            }
        };
        match bs.load_seen_commit(h) {
            Ok(Some(_)) => {}
            Ok(None) => f.damage(
                db,
                "seen commit",
                Some(h),
                format!("block {h}'s seen commit is missing"),
            ),
            Err(e) => f.add(db, "seen commit", Some(h), &e),
        }
        // The canonical commit of h − 1 travels in block h.
        if h > base.max(1)
            && let Some(block) = &block
        {
            match bs.load_block_commit(h - 1) {
                Ok(Some(c)) if c.encode() == block.last_commit().encode() => {}
                Ok(Some(_)) => f.damage(
                    db,
                    "block commit",
                    Some(h - 1),
                    format!(
                        "block {}'s stored commit is not the last commit block {h} carries",
                        h - 1
                    ),
                ),
                Ok(None) => f.damage(
                    db,
                    "block commit",
                    Some(h - 1),
                    format!("block {}'s commit is missing", h - 1),
                ),
                Err(e) => f.add(db, "block commit", Some(h - 1), &e),
            }
        }
        match bs.height_by_hash(&meta.block_hash) {
            Ok(Some(at)) if at == h => {}
            Ok(other) => f.damage(
                db,
                "hash index",
                Some(h),
                format!(
                    "block {h}'s hash {} leads to {}",
                    crate::error::hex(&meta.block_hash),
                    other.map_or("no height".to_string(), |a| format!("height {a}"))
                ),
            ),
            Err(e) => f.add(db, "hash index", Some(h), &e),
        }
    }
    // Nothing above the height: a save is one atomic batch with the height record.
    match bs.highest_stored_height() {
        Ok(Some(above)) if above > top => f.damage(
            db,
            "records above the height",
            Some(above),
            format!("a record at height {above} lies above the block store's height {top}"),
        ),
        Ok(_) => {}
        Err(e) => f.add(db, "records above the height", None, &e),
    }
}

/// Step 3: the state, its genesis hash, and each height's results and history.
fn check_state<C: Chain>(f: &mut Findings, st: &StateStore<C>) {
    let db = "state";
    let state = match st.load_state() {
        Ok(s) => s,
        Err(e) => return f.add(db, "state", None, &e),
    };
    let Some(state) = state else { return };
    let top = state.height();
    if top == 0 {
        return;
    }
    match st.load_genesis_hash() {
        Ok(Some(_)) => {}
        Ok(None) => f.damage(
            db,
            "genesis hash",
            None,
            "the genesis hash is missing".into(),
        ),
        Err(e) => f.add(db, "genesis hash", None, &e),
    }
    let base = match st.base() {
        Ok(b) => b,
        Err(e) => return f.add(db, "state base", None, &e),
    };
    // The slots the chain keeps history in (the saved state's).
    let names = C::State::history_names();
    let slots: Vec<HistorySlot> = state.histories().iter().map(|v| v.slot).collect();
    for h in base.max(1)..=top {
        f.report.counts.state_heights += 1;
        if let Err(e) = st.load_results(h) {
            f.add(db, "results", Some(h), &e);
        }
        for &slot in &slots {
            let name = names[slot.index() as usize];
            match st.load_history(slot, h) {
                Ok(Some(_)) => {}
                Ok(None) => f.damage(
                    db,
                    format!("history {name}"),
                    Some(h),
                    format!("the {name} in force at height {h} is missing"),
                ),
                Err(e) => f.add(db, format!("history {name}"), Some(h), &e),
            }
        }
    }
}
