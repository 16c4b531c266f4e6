//! On a journal home `sync --json` counts what each database wrote: the node writes flush
//! points and consensus blocks as units (one per window or block, all three databases in
//! it), and each database's `units` and `bytes_written` count its parts of them — the
//! same bytes a redb home's batches carry, without inflating the fsyncs per block.

use crate::cli_support::*;

use std::path::Path;

fn sync(home: &Path, engine: &str) -> serde_json::Value {
    let o = run(&[
        "sync",
        "--home",
        home.to_str().unwrap(),
        "--blocks",
        "200",
        "--consensus-blocks",
        "5",
        "--engine",
        engine,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap()
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn a_journal_sync_counts_each_databases_units_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let journal = sync(&dir.path().join("journal"), "journal");
    let redb = sync(&dir.path().join("redb"), "redb");
    assert!(u(&journal["bytes_written"]) > 0, "{journal}");
    let mut sum = 0;
    for db in ["block_store", "state", "app"] {
        let j = &journal["databases"][db];
        let r = &redb["databases"][db];
        assert!(u(&j["bytes_written"]) > 0, "{db}: {j}");
        // At least a unit per consensus block.
        assert!(u(&j["units"]) >= 5, "{db}: {j}");
        assert_eq!(u(&r["units"]), 0, "redb writes batches: {r}");
        sum += u(&j["bytes_written"]);
        if db != "block_store" {
            // The same chain: the same records (a journal block store writes its parts'
            // pointers beside them, so its bytes differ a little).
            assert_eq!(j["bytes_written"], r["bytes_written"], "{db}");
        }
    }
    assert_eq!(u(&journal["bytes_written"]), sum);
    let (jb, rb) = (u(&journal["bytes_written"]), u(&redb["bytes_written"]));
    assert!(
        jb.abs_diff(rb) * 100 < rb,
        "journal {jb} vs redb {rb} bytes"
    );
    // A consensus block is still one synced unit (not one per database).
    assert_eq!(journal["fsyncs_per_block"]["consensus"], 1.0, "{journal}");
    assert_eq!(redb["fsyncs_per_block"]["consensus"], 4.0, "{redb}");
}
