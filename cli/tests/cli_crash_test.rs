//! `flushpoint crash-test` kills real `sync` processes and finds no mismatch.

mod cli_support;
use cli_support::*;

#[test]
fn short_crash_test_lands_its_kills_and_finds_no_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[
        "crash-test",
        "--kills",
        "3",
        "--seed",
        "2",
        "--blocks",
        "60",
        "--consensus-blocks",
        "2",
        "--flush-every",
        "10",
        "--json",
        "--work-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let j: serde_json::Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    assert_eq!(j["kills"], 3);
    assert_eq!(j["mismatches"], 0);
    assert!(j["completed_runs_compared"].as_u64().unwrap() >= 1);
}
