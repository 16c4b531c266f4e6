//! The node's one write path: how a window — the writes of blocks F+1..F′ that the block
//! store, the state and the app hold — reaches the disk. The ordered-or-unit choice is made
//! once at open and carried as a [`WritePath`]; [`WritePath::write_window`] writes every
//! window: a synchronous flush point's, a background flush point's (on the flush thread) and
//! a consensus block's when it is a unit.
//!
//! Invariant: `write_window` writes in the crash order of ADR 0002: the block store's window
//! (which holds the flush record {F, F′}), then the state's, then the app's, each step
//! started only after the previous one returned `Ok`; on a unit group (ADR 0011) the block
//! store's, the state's and a member app's windows are one unit, and an app outside the
//! group is written after it.
//! Invariant: `write_window` decides nothing (the path, the app's share and the writer are
//! given), fires no event and moves no height: the node does, once it returned `Ok`.
//! Invariant: a window's writes leave memory only once they are durable (a unit's, on the
//! flush thread, once its group has applied it: ADR 0015).

use std::sync::Arc;

use crate::db::{Durability, EntryRef, UnitGroup, UnitMember, UnitPart};
use crate::error::Result;
use crate::holding::{FrozenWindow, HeldStore};

use super::NodeDb;

/// How the node's windows reach the disk, chosen at open from its databases.
#[derive(Clone)]
pub(super) enum WritePath {
    /// Each database's window is one synced batch of its own, in the order block store,
    /// state, app (ADR 0002).
    Ordered,
    /// The block store's and the state's databases are two members of one unit group: their
    /// windows are written as one unit (ADR 0011).
    Unit(UnitPath),
}

/// The node's unit group and its two members.
#[derive(Clone)]
pub(super) struct UnitPath {
    /// The block store's database's membership (the group and its member name).
    block_store: UnitMember,
    /// The state database's member name.
    state: String,
}

/// The app's share of the node's windows, decided each time the app is asked to hold
/// (the start of block sync; a unit path's first consensus block).
pub(super) enum AppShare {
    /// Not asked to hold since open: on a unit path the first consensus block asks.
    Unasked,
    /// Not holding: the app writes each commit itself and a window holds nothing of it.
    NotHeld,
    /// Holding ([`crate::App::hold`] returned true), with its held store when it has one
    /// ([`crate::App::held_store`]).
    Held(Option<AppStore>),
}

/// The app's held store and its place in the node's unit group.
#[derive(Clone)]
pub(super) struct AppStore {
    /// The store, frozen and written by the node instead of [`crate::App::write_held`] when
    /// it is a member of the group, or on the flush thread.
    pub(super) store: Arc<dyn HeldStore>,
    /// Its member name in the node's unit group: its window then joins the node's units.
    pub(super) member: Option<String>,
}

/// How `write_window` writes the app's window.
pub(super) enum AppWrite<'a> {
    /// A member of the unit group (its name, its store): inside the unit.
    Member(&'a str, &'a dyn HeldStore),
    /// The app's held store, frozen between blocks: written after the node's databases
    /// (the flush thread).
    Frozen(&'a dyn HeldStore),
    /// The app's own write, called after the node's databases on the node's thread; it
    /// returns the bytes it wrote.
    Hook(&'a mut dyn FnMut() -> Result<u64>),
}

/// Who writes a window, which says where its writes are when the write starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    /// The node's thread (a synchronous flush point, a consensus block): the writes are
    /// still held, and each database's are taken by its write ([`crate::HoldingDb::write_held`]
    /// keeps them held on `Err`).
    NodeThread,
    /// The flush thread: every window was frozen between blocks; a unit stays in flight
    /// until its group has applied it (ADR 0015).
    FlushThread,
}

impl WritePath {
    /// The path of a node over `block_db` and `state_db`: a unit when they are two distinct
    /// members of one group.
    pub(super) fn of(block_db: &NodeDb, state_db: &NodeDb) -> WritePath {
        match (block_db.unit_member(), state_db.unit_member()) {
            (Some(b), Some(s)) if b.same_group(&s) && b.name != s.name => {
                WritePath::Unit(UnitPath {
                    block_store: b,
                    state: s.name,
                })
            }
            _ => WritePath::Ordered,
        }
    }

    /// True on a unit group.
    pub(super) fn is_unit(&self) -> bool {
        matches!(self, WritePath::Unit(_))
    }

    /// `store`'s member name when it is a member of the node's unit group.
    pub(super) fn member_name(&self, store: &dyn HeldStore) -> Option<String> {
        let WritePath::Unit(unit) = self else {
            return None;
        };
        let member = store.unit_member()?;
        member.same_group(&unit.block_store).then_some(member.name)
    }

    /// Writes one window: the block store's (with its flush record), the state's and the
    /// app's held writes, in the crash order. Returns the key and value bytes written.
    ///
    /// `Ok`: every database is durable at the window's end. `Err`: the step that failed and
    /// every later one may or may not be durable; the databases that failed are poisoned.
    pub(super) fn write_window(
        &self,
        block_db: &NodeDb,
        state_db: &NodeDb,
        app: AppWrite<'_>,
        writer: Writer,
    ) -> Result<u64> {
        debug_assert!(
            match (&app, writer) {
                (AppWrite::Frozen(_), w) => w == Writer::FlushThread,
                (AppWrite::Hook(_), w) => w == Writer::NodeThread,
                (AppWrite::Member(..), _) => true,
            },
            "invariant: the flush thread writes a frozen app window, the node's thread its hook"
        );
        let mut bytes = match self {
            WritePath::Unit(unit) => {
                let mut stores: Vec<(&str, &dyn HeldStore)> = vec![
                    (&unit.block_store.name, &**block_db as &dyn HeldStore),
                    (&unit.state, &**state_db as &dyn HeldStore),
                ];
                if let AppWrite::Member(name, store) = &app {
                    stores.push((name, *store));
                }
                if writer == Writer::NodeThread {
                    // Taken now, between blocks (the flush thread's were frozen when the
                    // window was submitted).
                    for (_, store) in &stores {
                        store.freeze()?;
                    }
                }
                // Crash: steps 1–3 as one unit (ADR 0011): the block store, the state and,
                // when it is a member, the app — all durable or none; an app that is not a
                // member is written alone after it.
                write_unit(&*unit.block_store.group, &stores)?
            }
            WritePath::Ordered => {
                // Crash: three synced batches in this order — block store (with the flush
                // record), state, app; a cut between them leaves the shapes of ADR 0002's
                // crash table.
                // Step 1: the block store's blocks F+1..F′ and the flush record, one synced
                // batch. It must come first: steps 2 and 3 are replayed from these blocks
                // after a crash.
                let mut bytes = writer.write(block_db)?;
                // Step 2: the state at F′ and the results F+1..F′. Only after step 1 is
                // durable.
                bytes += writer.write(state_db)?;
                bytes
            }
        };
        // Crash: step 3, the app, last — after the unit, or after the state's batch: an app
        // ahead of the state could not be rolled forward (a cut before it leaves
        // `AppBehind`, which replays the app from the stored blocks).
        match app {
            AppWrite::Member(..) => {}
            AppWrite::Frozen(store) => bytes += store.write_frozen()?.bytes,
            AppWrite::Hook(write) => bytes += write()?,
        }
        if let (Writer::FlushThread, WritePath::Unit(unit)) = (writer, self) {
            // The window is durable; it stays in flight until the group has applied it too
            // (its writes leave the group's memory), so the next window freezes only then:
            // two windows in memory at most (ADR 0015).
            unit.block_store.group.wait_applied()?;
        }
        Ok(bytes)
    }
}

impl Writer {
    /// Writes one database's window as one synced batch: its held writes from the node's
    /// thread, its frozen window from the flush thread. Returns its key and value bytes.
    fn write(self, db: &NodeDb) -> Result<u64> {
        Ok(match self {
            Writer::NodeThread => db.write_held()?.bytes,
            Writer::FlushThread => db.write_frozen()?.bytes,
        })
    }
}

impl AppShare {
    /// True when the app holds its writes until a flush point.
    pub(super) fn holds(&self) -> bool {
        matches!(self, AppShare::Held(_))
    }

    /// The app's held store, when it holds and has one.
    pub(super) fn store(&self) -> Option<&AppStore> {
        match self {
            AppShare::Held(store) => store.as_ref(),
            AppShare::Unasked | AppShare::NotHeld => None,
        }
    }

    /// True when the app's window joins the node's units (it holds and its held store is a
    /// member of the node's group).
    pub(super) fn joins_unit(&self) -> bool {
        self.store().is_some_and(|s| s.member.is_some())
    }
}

/// Writes the frozen windows of `stores` (each `(member name, store)`) as one unit of
/// `group`, then drops them from the stores. Returns the key and value bytes written.
fn write_unit(group: &dyn UnitGroup, stores: &[(&str, &dyn HeldStore)]) -> Result<u64> {
    let windows: Vec<Option<FrozenWindow>> = stores
        .iter()
        .map(|(_, s)| s.frozen_window())
        .collect::<Result<_>>()?;
    let mut entries: Vec<(&str, Box<dyn Iterator<Item = EntryRef<'_>> + '_>)> = stores
        .iter()
        .zip(&windows)
        .filter_map(|((name, _), w)| w.as_ref().map(|w| (*name, Box::new(w.entries()) as _)))
        .collect();
    let mut parts: Vec<UnitPart<'_, '_>> = entries
        .iter_mut()
        .map(|(name, it)| (*name, &mut **it as &mut dyn Iterator<Item = EntryRef<'_>>))
        .collect();
    // Crash: one unit. A cut before it is durable leaves none of the windows on disk, after
    // it every one (recovery keeps whole units only): never the state without its blocks,
    // never the app without the state.
    group.write_unit(&mut parts, Durability::Synced)?;
    drop(parts);
    drop(entries);
    let mut bytes = 0;
    for ((_, store), window) in stores.iter().zip(&windows) {
        if let Some(w) = window {
            bytes += store.frozen_written(w)?.bytes;
        }
    }
    Ok(bytes)
}
