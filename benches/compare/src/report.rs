//! Tables: the block shape, the write table (medians and min–max over rounds, ratios within
//! a round), and the index table.
//!
//! Invariant: a row whose run failed its outcome check prints FAIL and is counted; no
//! figure of a failed run enters a median.

use crate::flushpoint_runs::IndexRow;
use crate::shape::{Shape, Store};
use crate::{Contender, RunReport};

/// Bytes as MiB, one decimal.
pub fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn spread(v: &[f64], prec: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let m = median(v.to_vec());
    if v.len() < 2 {
        format!("{m:.prec$}")
    } else {
        format!("{m:.prec$} ({lo:.prec$}–{hi:.prec$})")
    }
}

/// Per round, `rate` of a run ÷ `rate` of the base row's run in the same round (rounds
/// whose base run failed are left out); empty without a base row.
fn ratios_to(
    runs: &[RunReport],
    base: Option<&[RunReport]>,
    rate: &dyn Fn(&RunReport) -> f64,
) -> Vec<f64> {
    base.map_or_else(Vec::new, |base| {
        runs.iter()
            .zip(base)
            .filter(|(_, d)| d.error.is_none())
            .map(|(r, d)| rate(r) / rate(d))
            .collect()
    })
}

/// A ratio column's cell: median (min–max), or "–" when there is no base to divide by.
fn ratio_cell(ratios: &[f64]) -> String {
    if ratios.is_empty() {
        "–".into()
    } else {
        spread(ratios, 2)
    }
}

/// Prints the measured shape of one profile.
pub fn print_shape(shape: &Shape) {
    println!(
        "\nshape of a {} block (flushpoint consensus path, mean over {} sampled blocks; peers write the same records):",
        shape.profile,
        shape.blocks.len()
    );
    let s = shape.summary();
    let mut total = 0.0;
    for st in Store::ALL {
        let x = s[st.index()];
        total += x.key_bytes + x.value_bytes;
        println!(
            "  {:<6} {:>6.1} records, {:>8.0} B keys, {:>10.0} B values",
            st.name(),
            x.ops,
            x.key_bytes,
            x.value_bytes
        );
    }
    println!("  total  {total:.0} B logical per block");
}

/// Prints the write table of one profile; returns the failed runs.
pub fn print_write_table(
    profile: &str,
    cs: &[Contender],
    runs: &[Vec<RunReport>],
    loads: &[(f64, f64)],
) -> u64 {
    let rounds = loads.len();
    println!(
        "\n## {profile} blocks: {rounds} round(s), median (min–max); ratio = blocks/s ÷ fp-deferred's in the same round; \"to durable\" stops the clock when every block is durable, before the close (the journal's backlog and closing checkpoint, a peer's close, come after), and its ratio is to fpj-deferred's in the same round"
    );
    println!(
        "| contender | crash-safe | blocks/s | ms/block | ratio to fp-deferred | blocks/s to durable | ratio to fpj-deferred, to durable | syncs/block (counted by) | write amp (wchar) | write amp (disk writes) | on-disk ÷ logical | peak RSS | blocks/run |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let base = cs.iter().position(|c| c.name == "fp-deferred");
    let journal_base = cs.iter().position(|c| c.name == "fpj-deferred");
    let rate = |r: &RunReport| r.blocks as f64 / r.elapsed_s.max(1e-9);
    let durable_rate = |r: &RunReport| r.blocks as f64 / r.durable_s.max(1e-9);
    let mut failed = 0;
    for (ci, c) in cs.iter().enumerate() {
        let rs = &runs[ci];
        if let Some(bad) = rs.iter().find(|r| r.error.is_some()) {
            failed += rs.iter().filter(|r| r.error.is_some()).count() as u64;
            println!(
                "| {} | {} | FAIL: {} |",
                c.name,
                c.crash_safe,
                bad.error.as_deref().unwrap_or("")
            );
            continue;
        }
        let per = |f: &dyn Fn(&RunReport) -> f64| rs.iter().map(f).collect::<Vec<_>>();
        // Blocks/s of a row that writes the block store's records alone are not comparable
        // with whole blocks': no ratio.
        let whole = c.stores() == crate::shape::Store::ALL;
        let ratios = ratios_to(rs, base.filter(|_| whole).map(|b| &runs[b][..]), &rate);
        let durable_ratios = ratios_to(
            rs,
            journal_base.filter(|_| whole).map(|b| &runs[b][..]),
            &durable_rate,
        );
        let logical = |r: &RunReport| r.logical_bytes.max(1) as f64;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} | {:.0} |",
            c.name,
            c.crash_safe,
            spread(&per(&|r| rate(r)), 0),
            spread(&per(&|r| 1e3 / rate(r)), 3),
            ratio_cell(&ratios),
            spread(&per(&|r| durable_rate(r)), 0),
            ratio_cell(&durable_ratios),
            spread(&per(&|r| r.syncs as f64 / r.blocks.max(1) as f64), 3),
            rs.first().map_or("", |r| r.sync_method.as_str()),
            spread(&per(&|r| r.io.wchar as f64 / logical(r)), 2),
            spread(&per(&|r| r.io.write_bytes as f64 / logical(r)), 2),
            spread(&per(&|r| r.disk_bytes as f64 / logical(r)), 2),
            mib(median(per(&|r| r.peak_rss_bytes as f64)) as u64),
            median(per(&|r| r.blocks as f64)),
        );
    }
    let l: Vec<String> = loads
        .iter()
        .enumerate()
        .map(|(i, (a, b))| format!("round {}: {a:.2} → {b:.2}", i + 1))
        .collect();
    println!(
        "load average (1 min) at the start → end of each round: {}",
        l.join("; ")
    );
    failed
}

/// Prints, for the rows that sync every block, one block's commit time (median and 99th
/// percentile over the run's blocks; medians over rounds) beside the raw limit's of the same
/// bytes in the same round (`raw-sync` for whole blocks, `raw-sync-blocks` for the block
/// store's records that `save_block` writes): the latency a consensus block waits for. A
/// row's blocks/s in the write table also pays for the work it leaves behind (the journal's
/// applier, a close), and does not show it.
pub fn print_commit_table(profile: &str, cs: &[Contender], runs: &[Vec<RunReport>]) {
    println!("\n## {profile} blocks: one block's commit time (rows that sync every block)");
    println!(
        "| contender | p50 ms | p99 ms | raw limit of the same bytes | p50 ÷ the limit's p50 (same round) |"
    );
    println!("|---|---|---|---|---|");
    for (ci, c) in cs.iter().enumerate() {
        let rs = &runs[ci];
        let times: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| r.commit_ms)
            .collect();
        if times.is_empty() {
            continue;
        }
        let raw = cs.iter().position(|d| d.name == c.raw_limit());
        let ratios: Vec<f64> = match raw {
            Some(b) => rs
                .iter()
                .zip(&runs[b])
                .filter_map(
                    |(r, d)| match (r.error.is_none(), r.commit_ms, d.commit_ms) {
                        (true, Some((p, _)), Some((q, _))) if d.error.is_none() => Some(p / q),
                        _ => None,
                    },
                )
                .collect(),
            None => vec![],
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            c.name,
            spread(&times.iter().map(|t| t.0).collect::<Vec<_>>(), 3),
            spread(&times.iter().map(|t| t.1).collect::<Vec<_>>(), 3),
            c.raw_limit(),
            ratio_cell(&ratios),
        );
    }
}

/// Prints the index table.
pub fn print_index(rows: &[IndexRow]) {
    println!(
        "| variant | lookup | keys | ns/lookup | rchar/lookup | read_bytes/lookup | read syscalls/lookup | syncs |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {} |",
            r.variant,
            r.lookup,
            r.keys,
            r.ns_per_lookup,
            r.rchar_per_lookup,
            r.read_bytes_per_lookup,
            r.syscr_per_lookup,
            r.syncs
        );
    }
}
