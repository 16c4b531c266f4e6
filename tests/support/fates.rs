//! What a crash leaves on `SimFs`, as fates for its directory operations and its files,
//! and the event oracle across a crash.
//!
//! Invariant: every fate is drawn from the seed given, so a printed seed replays the same
//! crash images.

use super::{Rng, full};

/// The directory fates tried for a crash with `n` directory ops pending: all dropped, all
/// kept, every ordered prefix, and every subset up to `subsets_max_ops` pending ops, else
/// `samples` seeded random subsets.
pub fn dir_fates(
    n: usize,
    seed: u64,
    subsets_max_ops: usize,
    samples: usize,
) -> Vec<flushpoint::testing::DirFate> {
    use flushpoint::testing::DirFate;
    let mut v = vec![DirFate::DropAll, DirFate::KeepAll];
    v.extend((1..n).map(DirFate::Prefix));
    if n <= subsets_max_ops {
        v.extend((0..1u64 << n).map(DirFate::Mask));
    } else {
        let mut rng = Rng(seed);
        v.extend((0..samples).map(|_| DirFate::Mask(rng.next_u64())));
    }
    v
}

/// The file fates tried for a crash: unsynced writes dropped, kept, and landed or torn at
/// random (1 seed; 5 with `FLUSHPOINT_FULL=1`).
pub fn file_fates(seed: u64) -> Vec<flushpoint::testing::FileFate> {
    use flushpoint::testing::FileFate;
    let seeds = if full() { 5 } else { 1 };
    let mut v = vec![FileFate::DropAll, FileFate::KeepAll];
    v.extend((0..seeds).map(|i| FileFate::Random(seed.wrapping_add(i))));
    v
}

/// The event oracle across a crash: every event fired before it is for a block the
/// recovery kept (at or below `recovered`), and no block's event fires twice across the
/// two runs.
pub fn check_events(
    before: &[flushpoint::Event],
    after: &[flushpoint::Event],
    recovered: u64,
) -> std::result::Result<(), String> {
    if let Some(e) = before.iter().find(|e| e.height > recovered) {
        return Err(format!(
            "event for block {} fired, but the crash lost it (recovered at {recovered})",
            e.height
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for e in before.iter().chain(after) {
        if matches!(e.kind, flushpoint::EventKind::NewBlock { .. }) && !seen.insert(e.height) {
            return Err(format!("block {} fired twice", e.height));
        }
    }
    Ok(())
}
