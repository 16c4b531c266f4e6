//! `flushpoint sync` says how long the start took — the read-only check, the open with the
//! engine's recovery, the handshake — in its first lines and in `--json` (`open`), so an
//! operator sees what a restart costs.

use crate::cli_support::*;

/// The `open` object of a `--json` summary: its four figures, checked to add up.
fn open_times(j: &serde_json::Value) -> [f64; 4] {
    let f = |k: &str| {
        j["open"][k]
            .as_f64()
            .unwrap_or_else(|| panic!("open.{k} missing: {j}"))
    };
    let t = [f("check_s"), f("home_s"), f("handshake_s"), f("total_s")];
    assert!(t.iter().all(|s| *s >= 0.0), "{t:?}");
    assert!(
        (t[0] + t[1] + t[2] - t[3]).abs() < 1e-9,
        "total is not the sum: {t:?}"
    );
    t
}

#[test]
fn a_run_reports_how_long_its_open_took_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    for engine in ["journal", "redb"] {
        let home = dir.path().join(engine);
        let fresh = sync_json_on(&home, Some(engine), 20, 2, 3);
        let [check, home_s, _, _] = open_times(&fresh);
        // A new home has nothing to check read-only; it is created in the open.
        assert!(check < home_s, "{engine}: check {check} s, open {home_s} s");

        let again = sync_json_on(&home, Some(engine), 20, 2, 3);
        let [check, home_s, _, total] = open_times(&again);
        assert!(check > 0.0 && home_s > 0.0, "{engine}: {check} {home_s}");
        assert!(total >= check + home_s, "{engine}");

        let o = run(&[
            "sync",
            "--home",
            home.to_str().unwrap(),
            "--blocks",
            "20",
            "--consensus-blocks",
            "2",
            "--seed",
            "3",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let line = stdout(&o)
            .lines()
            .find(|l| l.starts_with("opened in "))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{engine}: no `opened in` line:\n{}", stdout(&o)));
        for part in ["read-only check", "open and recovery", "handshake"] {
            assert!(line.contains(part), "{line}");
        }
    }
}
