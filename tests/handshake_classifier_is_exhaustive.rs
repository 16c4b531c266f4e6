//! Property: the handshake classifier maps every (block store, state, app, flush record)
//! shape to exactly the case DESIGN.md's crash table gives it, or to a refusal.

use std::collections::BTreeMap;

use flushpoint::{FlushRecord, HandshakeCase, Observed, classify};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Rec {
    Absent,
    /// The record a flush point ending at B wrote: {S, B} when S < B, {B − 4, B} when S == B.
    Matching,
    /// A record that no flush point could have left with these heights: {S − 1, B + 1}.
    NotMatching,
    /// An older flush point's record, followed by per-block (consensus) writes: {B − 3, B − 2}.
    Stale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Case(&'static str),
    Refused,
}

fn record(b: u64, s: u64, r: Rec) -> Option<FlushRecord> {
    match r {
        Rec::Absent => None,
        Rec::Matching if s < b => Some(FlushRecord { from: s, to: b }),
        Rec::Matching => Some(FlushRecord { from: b - 4, to: b }),
        Rec::NotMatching => Some(FlushRecord {
            from: s.saturating_sub(1),
            to: b + 1,
        }),
        Rec::Stale => Some(FlushRecord {
            from: b - 3,
            to: b - 2,
        }),
    }
}

/// The expected outcome, written from DESIGN.md's tables, not from the classifier:
/// - the flush-point rows (the record ends at B: the block store's last write was step 1):
///   after step 1 (B = F′, S = F = record.from, A ≤ F) roll forward; after step 2
///   (S = B, A ≤ B) the app catches up; after step 3 all equal.
/// - the per-block rows (no record ending at B): B = S = A nothing; B = S, A < S replay the
///   app; B = S + 1, A ≤ S apply B; B = S + 1 = A rebuild the state from B's results.
/// - everything else (a record above the block store, state ahead of the block store, app
///   ahead of state outside B = S + 1 = A, a gap with no record) is refused.
fn expected(b: u64, s: u64, a: u64, r: Rec) -> Outcome {
    use Outcome::*;
    let rec = record(b, s, r);
    if let Some(rec) = rec {
        if rec.to > b {
            return Refused;
        }
        if rec.to == b {
            return match (s, a) {
                _ if s == b && a == b => Case("consistent"),
                _ if s == b && a < b => Case("app-behind"),
                _ if s == rec.from && s < b && a <= s => Case("flush-roll-forward"),
                _ => Refused,
            };
        }
    }
    if s == b && a == s {
        Case("consistent")
    } else if s == b && a < s {
        Case("app-behind")
    } else if b == s + 1 && a <= s {
        Case("block-store-ahead")
    } else if b == s + 1 && a == b {
        Case("state-behind-app")
    } else {
        Refused
    }
}

fn actual(b: u64, s: u64, a: u64, r: Rec) -> Outcome {
    let o = Observed {
        block_store_height: b,
        state_height: s,
        app_height: a,
        record: record(b, s, r),
    };
    match classify(&o) {
        Ok(HandshakeCase::Fresh) => panic!("classify never answers Fresh (no state saved)"),
        Ok(c) => Outcome::Case(c.name()),
        Err(reason) => {
            assert!(!reason.is_empty(), "a refusal says why");
            Outcome::Refused
        }
    }
}

fn enumerate(records: &[Rec]) -> BTreeMap<Outcome, usize> {
    let h = 10;
    let heights = [h - 1, h, h + 1, h + 2];
    let mut counts = BTreeMap::new();
    let mut n = 0;
    for b in heights {
        for s in heights {
            for a in heights {
                for &r in records {
                    n += 1;
                    let got = actual(b, s, a, r);
                    let want = expected(b, s, a, r);
                    assert_eq!(
                        got,
                        want,
                        "B={b} S={s} A={a} record {r:?} = {:?}",
                        record(b, s, r)
                    );
                    // Pure: the same input gives the same answer.
                    assert_eq!(actual(b, s, a, r), got);
                    *counts.entry(got).or_insert(0) += 1;
                }
            }
        }
    }
    assert_eq!(n, 4 * 4 * 4 * records.len());
    assert_eq!(
        counts.values().sum::<usize>(),
        n,
        "each shape has exactly one outcome"
    );
    counts
}

#[test]
fn handshake_classifier_is_exhaustive() {
    let counts = enumerate(&[Rec::Absent, Rec::Matching, Rec::NotMatching]);
    println!("192 shapes (B, S, A in h-1..=h+2 × record absent/matching/not matching):");
    for (o, n) in &counts {
        println!("  {o:?}: {n}");
    }
    // Every repair case is reachable.
    for case in [
        "consistent",
        "app-behind",
        "block-store-ahead",
        "state-behind-app",
        "flush-roll-forward",
    ] {
        assert!(
            counts.contains_key(&Outcome::Case(case)),
            "{case} reachable"
        );
    }
    assert!(counts.contains_key(&Outcome::Refused));
}

#[test]
fn handshake_classifier_treats_a_stale_record_as_per_block_shapes() {
    let counts = enumerate(&[Rec::Stale]);
    println!("64 shapes with a stale record: {counts:?}");
    assert!(!counts.contains_key(&Outcome::Case("flush-roll-forward")));
}
