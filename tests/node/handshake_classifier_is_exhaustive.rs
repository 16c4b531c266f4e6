//! Property: the handshake classifier maps every (block store, state, app, flush record)
//! shape over a height range to exactly the case the handshake table gives it, or to a
//! refusal.
//!
//! The domain is complete over `HEIGHT_MAX`: B, S, A ∈ 0..=HEIGHT_MAX, and the record is
//! `None` or any `{from, to}` with `from < to ≤ HEIGHT_MAX` (a `FlushRecord` with
//! `from ≥ to` does not decode, see `src/types/mod.rs`). Each shape is checked against
//! `table_oracle`, written row by row from the handshake table of
//! `adr/0002-deferred-writes.md` (the same table opens `src/node/handshake.rs`), not from
//! `classify`'s code.

use std::collections::BTreeMap;

use flushpoint::HandshakeCase;
use flushpoint::node::{Observed, classify};
use flushpoint::records::FlushRecord;

/// Highest height enumerated (B, S, A and both ends of the record). 7 heights give every
/// relation the table distinguishes (equal, one apart, more than one apart, in both
/// directions) with room for a record strictly inside, at and above each height.
const HEIGHT_MAX: u64 = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Case(&'static str),
    Refused,
}

/// Every flush record over the height range: `None` and every `from < to ≤ HEIGHT_MAX`.
fn all_records() -> Vec<Option<FlushRecord>> {
    let mut v = vec![None];
    for from in 0..=HEIGHT_MAX {
        for to in from + 1..=HEIGHT_MAX {
            v.push(Some(FlushRecord { from, to }));
        }
    }
    v
}

/// Every shape of the domain.
fn all_shapes() -> Vec<Observed> {
    let records = all_records();
    let mut v = Vec::new();
    for b in 0..=HEIGHT_MAX {
        for s in 0..=HEIGHT_MAX {
            for a in 0..=HEIGHT_MAX {
                for &record in &records {
                    v.push(Observed {
                        block_store_height: b,
                        state_height: s,
                        app_height: a,
                        record,
                    });
                }
            }
        }
    }
    v
}

/// The handshake table, one predicate per row, transcribed from ADR 0002:
///
/// | shape (B, S, A, record) | case |
/// |---|---|
/// | B = S = A | `Consistent` |
/// | B = S, A < S | `AppBehind` |
/// | B = S + 1, A ≤ S, record absent or stale | `BlockStoreAhead` |
/// | B = S + 1 = A, record absent or stale | `StateBehindApp` |
/// | record {S, B}, S < B, A ≤ S | `FlushRollForward` |
/// | record {F, B}, S = B, A ≤ S | `Consistent` / `AppBehind` |
/// | S > B; A > B; A > S (except B = S+1 = A without a record ending at B); B > S + 1 without record {S, B}; record.to > B; record.to = B with S ∉ {from, B} | refused |
///
/// "Stale" is a record left by an older flush point, below the block store (`to < B`).
/// A refusal row wins over an accepting row (the first two accepting rows name no record,
/// and the refusal row "record.to > B" applies to them too). Returns `Err` when the table
/// itself gives no answer or two different answers for a shape.
fn table_oracle(o: &Observed) -> Result<Outcome, String> {
    let (b, s, a) = (o.block_store_height, o.state_height, o.app_height);
    let rec = o.record;
    let absent_or_stale = rec.is_none_or(|r| r.to < b);
    let record_ending_at_b = rec.is_some_and(|r| r.to == b);
    let record_is_s_to_b = rec == Some(FlushRecord { from: s, to: b });

    // The refusal row, clause by clause.
    let refusals = [
        s > b,
        a > b,
        a > s && !(b == s + 1 && a == b && !record_ending_at_b),
        b > s + 1 && !record_is_s_to_b,
        rec.is_some_and(|r| r.to > b),
        rec.is_some_and(|r| r.to == b && s != r.from && s != b),
    ];
    if refusals.iter().any(|&r| r) {
        return Ok(Outcome::Refused);
    }

    // The accepting rows.
    let rows: [(bool, &'static str); 6] = [
        (b == s && s == a, "consistent"),
        (b == s && a < s, "app-behind"),
        (b == s + 1 && a <= s && absent_or_stale, "block-store-ahead"),
        (b == s + 1 && a == b && absent_or_stale, "state-behind-app"),
        (record_is_s_to_b && s < b && a <= s, "flush-roll-forward"),
        (
            record_ending_at_b && s == b && a <= s,
            if a == s { "consistent" } else { "app-behind" },
        ),
    ];
    let mut cases: Vec<&str> = rows.iter().filter(|r| r.0).map(|r| r.1).collect();
    cases.dedup();
    match cases[..] {
        [case] => Ok(Outcome::Case(case)),
        [] => Err(format!("the table gives no row for {o:?}")),
        _ => Err(format!("the table gives several rows for {o:?}: {cases:?}")),
    }
}

/// What the crate's `classify` answers.
fn crate_classifier(o: &Observed) -> Outcome {
    match classify(o) {
        Ok(HandshakeCase::Fresh) => panic!("classify never answers Fresh (no state saved)"),
        Ok(c) => Outcome::Case(c.name()),
        Err(reason) => {
            assert!(!reason.is_empty(), "a refusal says why: {o:?}");
            Outcome::Refused
        }
    }
}

/// Compares `classifier` with the table on every shape. `Ok` holds the count per
/// outcome; `Err` the number of disagreements and the first few.
fn compare_with_table(
    classifier: impl Fn(&Observed) -> Outcome,
) -> Result<BTreeMap<Outcome, usize>, (usize, Vec<String>)> {
    let mut counts = BTreeMap::new();
    let mut mismatches = 0;
    let mut first = Vec::new();
    for o in all_shapes() {
        let want = table_oracle(&o).unwrap_or_else(|e| panic!("{e}"));
        let got = classifier(&o);
        if got != want {
            mismatches += 1;
            if first.len() < 5 {
                first.push(format!("{o:?}: classifier {got:?}, table {want:?}"));
            }
        }
        *counts.entry(got).or_insert(0) += 1;
    }
    if mismatches == 0 {
        Ok(counts)
    } else {
        Err((mismatches, first))
    }
}

#[test]
fn handshake_classifier_is_exhaustive() {
    let shapes = all_shapes().len();
    let counts = compare_with_table(crate_classifier).unwrap_or_else(|(n, first)| {
        panic!("classify disagrees with the table on {n} shapes, first: {first:#?}")
    });
    println!(
        "{shapes} shapes (B, S, A in 0..={HEIGHT_MAX} x {} records: none and every from < to), 0 disagreements:",
        all_records().len()
    );
    for (o, n) in &counts {
        println!("  {o:?}: {n}");
    }
    // Every case and the refusal are reachable in this domain (else it is too small to
    // test them).
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
fn classify_is_pure() {
    for o in all_shapes() {
        assert_eq!(classify(&o), classify(&o), "{o:?}");
    }
}

#[test]
fn a_stale_record_never_rolls_forward() {
    // Records below the block store (an older flush point, then per-block writes).
    let mut stale = 0;
    for o in all_shapes() {
        if o.record.is_some_and(|r| r.to < o.block_store_height) {
            stale += 1;
            assert_ne!(
                crate_classifier(&o),
                Outcome::Case("flush-roll-forward"),
                "{o:?}"
            );
        }
    }
    println!("{stale} shapes with a stale record, none rolls forward");
    assert!(stale > 0);
}

/// A classifier under test.
type Classifier = Box<dyn Fn(&Observed) -> Outcome>;

/// The comparison rejects a classifier that is wrong on a few shapes only.
#[test]
fn comparison_rejects_wrong_classifiers() {
    let wrong: [(&str, Classifier); 5] = [
        (
            "accepts S = from + 1 inside a flush record",
            Box::new(|o: &Observed| match o.record {
                Some(r)
                    if r.to == o.block_store_height
                        && o.state_height == r.from + 1
                        && o.state_height < o.block_store_height
                        && o.app_height <= o.state_height =>
                {
                    Outcome::Case("flush-roll-forward")
                }
                _ => crate_classifier(o),
            }),
        ),
        (
            "refuses app-behind inside a flush record",
            Box::new(|o: &Observed| match crate_classifier(o) {
                Outcome::Case("app-behind")
                    if o.record.is_some_and(|r| r.to == o.block_store_height) =>
                {
                    Outcome::Refused
                }
                other => other,
            }),
        ),
        (
            "ignores a record above the block store",
            Box::new(|o: &Observed| {
                let mut o = *o;
                if o.record.is_some_and(|r| r.to > o.block_store_height) {
                    o.record = None;
                }
                crate_classifier(&o)
            }),
        ),
        (
            "rolls forward on a stale record",
            Box::new(|o: &Observed| match o.record {
                Some(r)
                    if r.to < o.block_store_height
                        && o.block_store_height == o.state_height + 1
                        && o.app_height <= o.state_height =>
                {
                    Outcome::Case("flush-roll-forward")
                }
                _ => crate_classifier(o),
            }),
        ),
        (
            "answers consistent to everything",
            Box::new(|_: &Observed| Outcome::Case("consistent")),
        ),
    ];
    for (name, classifier) in wrong {
        match compare_with_table(classifier) {
            Ok(_) => panic!("the comparison accepted a wrong classifier: {name}"),
            Err((n, first)) => println!("{name}: rejected, {n} disagreements, e.g. {}", first[0]),
        }
    }
}
