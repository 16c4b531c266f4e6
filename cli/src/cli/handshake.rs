//! The start-up handshake in words: what it would make of a home ([`classification`]:
//! `inspect`, and `sync`'s crash-test marker before it runs) and what it found and did
//! ([`handshake_text`]: `sync` and `rollback --repair`).
//!
//! Invariant: pure: decides from what was observed (`flushpoint::node::classify`) or reported,
//! reads and writes nothing.
//! Invariant: imports nothing from the tool's other modules.

use flushpoint::node::{Observed, classify};
use flushpoint::{HandshakeCase, HandshakeReport};
use serde::Serialize;

/// The handshake's verdict.
#[derive(Debug, Serialize)]
pub struct Classification {
    /// `consistent`, `repairable` or `inconsistent`.
    pub verdict: &'static str,
    /// The repair case, when repairable (or `consistent` / `fresh`).
    pub case: Option<&'static str>,
    /// In words.
    pub detail: String,
}

/// Classifies `o` in words.
pub fn classification(o: &Observed, has_state: bool) -> Classification {
    if !has_state {
        return if o.block_store_height == 0 && o.app_height == 0 {
            Classification {
                verdict: "consistent",
                case: Some("fresh"),
                detail: "empty home: the first sync saves the genesis state".into(),
            }
        } else {
            Classification {
                verdict: "inconsistent",
                case: None,
                detail: "blocks or app state exist but no state was saved".into(),
            }
        };
    }
    match classify(o) {
        Ok(HandshakeCase::Consistent) => Classification {
            verdict: "consistent",
            case: Some("consistent"),
            detail: format!("all three databases at height {}", o.state_height),
        },
        Ok(c) => {
            let how = match c {
                HandshakeCase::AppBehind => format!(
                    "the app is behind: the handshake replays blocks {}..={} on the app",
                    o.app_height + 1,
                    o.state_height
                ),
                HandshakeCase::BlockStoreAhead => format!(
                    "the block store is one block ahead (a crash after save_block): the handshake applies block {}",
                    o.block_store_height
                ),
                HandshakeCase::StateBehindApp => format!(
                    "the app committed block {} but the state did not: the handshake rebuilds the state from its saved results",
                    o.block_store_height
                ),
                HandshakeCase::FlushRollForward => format!(
                    "a crash inside a flush point (after its block-store step): the handshake rolls forward blocks {}..={} from the local block store",
                    o.state_height + 1,
                    o.block_store_height
                ),
                _ => format!("case {}", c.name()),
            };
            Classification {
                verdict: "repairable",
                case: Some(c.name()),
                detail: how,
            }
        }
        Err(reason) => Classification {
            verdict: "inconsistent",
            case: None,
            detail: format!("{reason}; the handshake refuses to start (nothing is changed)"),
        },
    }
}

/// Describes what the handshake found and did, in one line.
pub fn handshake_text(r: &HandshakeReport) -> String {
    let o = &r.observed;
    let seen = format!(
        "block store {}, state {}, app {}, flush record {}",
        o.block_store_height,
        o.state_height,
        o.app_height,
        o.record.map_or("none".to_string(), |r| r.to_string())
    );
    let did = match r.case {
        HandshakeCase::Fresh => "a new home: saved the genesis state".to_string(),
        HandshakeCase::Consistent => format!("consistent at height {}: nothing to repair", r.height),
        HandshakeCase::AppBehind => format!(
            "the app was behind: replayed {} block(s) on the app",
            r.app_replayed
        ),
        HandshakeCase::BlockStoreAhead => format!(
            "the block store was one block ahead: replayed {} block(s) on the app, applied {}",
            r.app_replayed, r.applied
        ),
        HandshakeCase::StateBehindApp => {
            "the app had committed a block the state had not: rebuilt the state from its saved results".to_string()
        }
        HandshakeCase::FlushRollForward => format!(
            "a crash inside a flush point: rolled forward {} block(s) from the local block store (app replayed {})",
            r.applied, r.app_replayed
        ),
        _ => format!("case {}", r.case.name()),
    };
    format!(
        "handshake: {} ({seen}) — {did}; now at height {}",
        r.case.name(),
        r.height
    )
}
