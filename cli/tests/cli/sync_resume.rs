//! `flushpoint sync`: a run ends at N+M with the fsync accounting in its JSON, a second run
//! on the finished home changes nothing, and an interrupted run resumed with the same flags
//! ends at the same height and app hash.

use crate::cli_support::*;

#[test]
fn sync_json_ends_at_n_plus_m_and_resume_is_consistent() {
    let dir = tempfile::tempdir().unwrap();
    // Consensus mode: a journal home (the default) writes a block as one unit; a redb home
    // as save_block + results + app + state = 4 synced batches.
    for (engine, consensus_syncs) in [("journal", 1.0), ("redb", 4.0)] {
        let home = dir.path().join(engine);
        let j = sync_json_on(&home, Some(engine), 40, 3, 9);
        assert_eq!(j["engine"], engine);
        for k in ["block_store", "state", "app"] {
            assert_eq!(j["heights"][k], 43, "{k} height: {j}");
        }
        assert_eq!(j["handshake"]["case"], "fresh");
        assert_eq!(j["blocks"], 43);
        assert!(j["flush_points"].as_u64().unwrap() >= 1);
        assert!(j["blocks_per_s"].as_f64().unwrap() > 0.0);
        assert_eq!(
            j["fsyncs_per_block"]["consensus"], consensus_syncs,
            "{engine}"
        );
        assert!(j["fsyncs_per_block"]["block_sync"].as_f64().unwrap() < 1.0);
        assert_eq!(j["app_hash"].as_str().unwrap().len(), 64);

        let again = sync_json(&home, 40, 3, 9);
        assert_eq!(again["engine"], engine);
        assert_eq!(again["handshake"]["case"], "consistent");
        assert_eq!(again["blocks"], 0);
        assert_eq!(again["app_hash"], j["app_hash"]);
        assert_eq!(again["heights"], j["heights"]);
    }
}

#[test]
fn interrupted_sync_resumes_to_the_uncut_height_and_hash() {
    let dir = tempfile::tempdir().unwrap();
    let reference = sync_json(&dir.path().join("ref"), 40, 2, 5);
    let home = dir.path().join("home");
    sync_killed_at(&home, 40, 10, 5, "flush-write-done block-store");
    let j = {
        let o = run(&[
            "sync",
            "--home",
            home.to_str().unwrap(),
            "--blocks",
            "40",
            "--consensus-blocks",
            "2",
            "--seed",
            "5",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<serde_json::Value>(stdout(&o).lines().last().unwrap()).unwrap()
    };
    assert_eq!(j["handshake"]["case"], "flush-roll-forward");
    assert_eq!(j["heights"], reference["heights"]);
    assert_eq!(j["app_hash"], reference["app_hash"]);
}

#[test]
fn every_mode_reaches_the_same_app_hash() {
    let dir = tempfile::tempdir().unwrap();
    let mut hashes = Vec::new();
    // Synced writes per block-synced block of the per-block modes: the consensus path is
    // one unit on a journal home, 4 synced batches on redb; the reference node's old path
    // writes 5 synced batches on either.
    for (engine, per_block, legacy) in [("journal", 1.0, 5.0), ("redb", 4.0, 5.0)] {
        for mode in ["deferred", "per-block", "legacy", "no-sync"] {
            let home = dir.path().join(format!("{engine}-{mode}"));
            let o = run(&[
                "sync",
                "--home",
                home.to_str().unwrap(),
                "--blocks",
                "15",
                "--consensus-blocks",
                "2",
                "--mode",
                mode,
                "--engine",
                engine,
                "--json",
            ]);
            assert!(o.status.success(), "{engine} {mode}: {}", stderr(&o));
            let j: serde_json::Value =
                serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
            if mode == "legacy" {
                assert_eq!(j["fsyncs_per_block"]["block_sync"], legacy, "{j}");
            }
            if mode == "per-block" {
                assert_eq!(j["fsyncs_per_block"]["block_sync"], per_block, "{j}");
            }
            if mode == "no-sync" {
                assert_eq!(j["floor_only"], true);
                assert_eq!(j["fsyncs_per_block"]["consensus"], 0.0);
            }
            hashes.push(j["app_hash"].clone());
        }
    }
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
}
