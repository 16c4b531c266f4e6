//! The home the rollback suites start from (`tests/crash/rollback_power_cut.rs`,
//! `tests/home/rollback_refusals.rs`): the demo chain synced in consensus on a simulated
//! file system.
//!
//! Invariant: the same height gives the same home, key for key ([`synced_to`]), so a home
//! rolled back can be compared with one synced straight to the target.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use flushpoint::db::collect_range;
use flushpoint::demo::{ChainSpec, KvApp, Profile};
use flushpoint::testing::SimFs;
use flushpoint::{Db, Direction, HoldingDb, Home, KeyRange, NoEvents, Node, RedbOptions};

/// Where the home lies on the simulated file system.
pub const HOME: &str = "/data/node/home";

/// A small page cache, so that a few blocks reach the file.
pub fn options() -> RedbOptions {
    RedbOptions::default().with_cache_bytes(64 * 1024)
}

/// The chain: validators change every 2 blocks and params every 3, so the state's history
/// is exercised by a rollback.
pub fn spec() -> ChainSpec {
    ChainSpec {
        seed: 0x7011,
        profile: Profile::Light,
        initial_height: 1,
        validator_change_every: 2,
        params_change_every: 3,
        empty_every: 0,
        account_keys: 1 << 20,
    }
}

pub fn home() -> PathBuf {
    PathBuf::from(HOME)
}

/// The demo app over the home's app database.
pub fn app_of(home: &Home) -> flushpoint::Result<KvApp<Arc<dyn Db>>> {
    KvApp::open(Arc::new(HoldingDb::new(home.app_db.clone() as Arc<dyn Db>)))
}

/// A home on a new `SimFs`, synced in consensus to `height`, stopped cleanly.
pub fn synced_to(height: u64) -> SimFs {
    let fs = SimFs::new();
    let home = Home::open_on(Arc::new(fs.clone()), &home(), &options()).unwrap();
    let (mut node, _) = Node::open(
        home.block_store_db.clone(),
        home.state_db.clone(),
        Box::new(app_of(&home).unwrap()),
        spec().chain(),
        Box::new(NoEvents),
    )
    .unwrap();
    while node.height() < height {
        let (b, p, c) = spec().next_block(node.state());
        node.commit_block(&b, &p, &c).unwrap();
    }
    node.stop(Instant::now()).unwrap();
    drop(home);
    fs
}

/// One database's contents.
pub type Map = BTreeMap<Bytes, Bytes>;
/// The three databases' contents: block store, state, app.
pub type Dump = [Map; 3];

/// The three databases of `home`, key for key.
pub fn dump_home(home: &Home) -> Result<Dump, String> {
    let one = |db: &dyn Db| -> Result<Map, String> {
        Ok(collect_range(db, KeyRange::all(), Direction::Forward)
            .map_err(|e| format!("read {}: {e}", db.name()))?
            .into_iter()
            .collect())
    };
    Ok([
        one(&*home.block_store_db)?,
        one(&*home.state_db)?,
        one(&*home.app_db)?,
    ])
}
