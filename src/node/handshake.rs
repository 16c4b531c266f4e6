//! The start-up handshake's classifier: a pure function of the three databases' heights and
//! the flush record, mapping every shape to exactly one repair case or a refusal.
//!
//! Heights are normalized by the caller: an empty block store or app counts as
//! `initial_height − 1`, the genesis state's height.
//!
//! | shape (B, S, A, record) | case | repair |
//! |---|---|---|
//! | B = S = A | `Consistent` | nothing |
//! | B = S, A < S | `AppBehind` | replay A+1..S on the app, state unchanged; app hashes must match |
//! | B = S + 1, A ≤ S, record absent or stale | `BlockStoreAhead` | replay A+1..S on the app, then apply B |
//! | B = S + 1 = A, record absent or stale | `StateBehindApp` | rebuild the state at B from B's saved results |
//! | record {S, B}, S < B, A ≤ S | `FlushRollForward` | replay A+1..S on the app, then apply S+1..B from the local block store |
//! | record {F, B}, S = B, A ≤ S | `Consistent` / `AppBehind` | as above |
//! | S > B; A > B; A > S (but B = S+1 = A); B > S + 1 without record {S, B}; record.to > B; record.to = B with S ∉ {from, B} | refused | nothing changes on disk |
//!
//! The repair of each case, and what a crash during it leaves, is the decision table of
//! `recovery.rs` (ADR 0017).
//!
//! Invariant: `classify` does no I/O and never panics.

use crate::types::FlushRecord;

/// What the handshake observed on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Observed {
    /// Block store height (normalized).
    pub block_store_height: u64,
    /// State height.
    pub state_height: u64,
    /// App height on disk (normalized).
    pub app_height: u64,
    /// The last flush record.
    pub record: Option<FlushRecord>,
}

/// A shape the handshake can repair (or that needs nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[non_exhaustive]
pub enum HandshakeCase {
    /// Nothing stored yet: the genesis state is saved.
    Fresh,
    /// All three at the same height.
    Consistent,
    /// Block store and state at S, the app behind: replay the app only.
    AppBehind,
    /// The block store one block ahead of the state (a per-block crash after `save_block`).
    BlockStoreAhead,
    /// The app committed block B but the state was not saved: rebuild it from B's results.
    StateBehindApp,
    /// A crash between a flush point's first two writes: roll forward from the local blocks.
    FlushRollForward,
}

impl HandshakeCase {
    /// A stable name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            HandshakeCase::Fresh => "fresh",
            HandshakeCase::Consistent => "consistent",
            HandshakeCase::AppBehind => "app-behind",
            HandshakeCase::BlockStoreAhead => "block-store-ahead",
            HandshakeCase::StateBehindApp => "state-behind-app",
            HandshakeCase::FlushRollForward => "flush-roll-forward",
        }
    }
}

/// Classifies the observed shape. `Err` carries why it is refused.
pub fn classify(o: &Observed) -> Result<HandshakeCase, &'static str> {
    let (b, s, a) = (o.block_store_height, o.state_height, o.app_height);
    if s > b {
        return Err("the state is ahead of the block store");
    }
    if a > b {
        return Err("the app is ahead of the block store");
    }
    if let Some(r) = o.record {
        if r.to > b {
            return Err("the flush record reaches above the block store");
        }
        if r.to == b {
            // The block store's last write was this flush point's step 1.
            return if a > s {
                Err("the app is ahead of the state inside a flush point")
            } else if s == b {
                Ok(if a == s {
                    HandshakeCase::Consistent
                } else {
                    HandshakeCase::AppBehind
                })
            } else if s == r.from {
                Ok(HandshakeCase::FlushRollForward)
            } else {
                Err("the state is neither at the flush record's start nor at its end")
            };
        }
    }
    if b == s {
        Ok(if a == s {
            HandshakeCase::Consistent
        } else {
            HandshakeCase::AppBehind
        })
    } else if b == s + 1 {
        Ok(if a == b {
            HandshakeCase::StateBehindApp
        } else {
            HandshakeCase::BlockStoreAhead
        })
    } else {
        Err(
            "the block store is more than one block ahead of the state with no flush record covering the gap",
        )
    }
}
