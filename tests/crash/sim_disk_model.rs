//! The simulated machine of `support::disk` itself (the crash suites' model of the media):
//! one RNG per disk, lies limited to one disk from op N on, and EIO injected into each kind
//! of call fires exactly where asked. A model that silently did less would make the suites
//! that run over it pass for the wrong reason.

use crate::support;

use redb::StorageBackend;
use support::disk::{Fate, Kind, Lie, Sim};

/// Three disks given the same pending writes.
fn three_alike() -> Sim {
    let sim = Sim::new(3);
    for d in 0..3 {
        let disk = sim.disk(d);
        disk.write(0, &[1u8; 4096]).unwrap();
        disk.sync_data().unwrap();
        for i in 0..8u64 {
            disk.write(i * 512, &[2 + i as u8; 512]).unwrap();
        }
    }
    sim
}

#[test]
fn each_disk_draws_its_own_fate_and_a_seed_replays() {
    let sim = three_alike();
    let seed = support::seed_printed("sim_disk_model", support::SEED_DEFAULT);
    let mut differing = 0;
    for s in 0..16 {
        let fate = Fate::Random(seed.wrapping_add(s));
        let images = sim.crash_images(fate);
        assert_eq!(images, sim.crash_images(fate), "a seed does not replay");
        if images[0] != images[1] || images[1] != images[2] {
            differing += 1;
        }
    }
    println!("sim_disk_model: 16 seeds, {differing} where identical disks met different fates");
    // One shared RNG would give identical disks identical images under every seed.
    assert!(
        differing >= 8,
        "the disks share their fate ({differing} of 16 differ)"
    );
    // The fixed fates treat every disk alike.
    let drop = sim.crash_images(Fate::DropAll);
    assert!(drop.iter().all(|i| i == &vec![1u8; 4096]));
    assert!(sim.crash_images(Fate::KeepAll).iter().all(|i| i[0] == 2));
}

#[test]
fn a_lie_covers_one_disk_from_its_first_op() {
    let sim = Sim::new(2);
    sim.lock().lie = Some(Lie {
        disk: Some(1),
        from_op: 5,
    });
    for d in 0..2 {
        sim.disk(d).write(0, &[7; 16]).unwrap(); // ops 1, 3
        sim.disk(d).sync_data().unwrap(); // ops 2, 4: before the lie
    }
    for d in 0..2 {
        sim.disk(d).write(0, &[9; 16]).unwrap(); // ops 5, 7
        sim.disk(d).sync_data().unwrap(); // ops 6, 8: disk 1 lies
    }
    let images = sim.durable_images();
    assert_eq!(
        images[0],
        vec![9; 16],
        "the honest disk lost a synced write"
    );
    assert_eq!(images[1], vec![7; 16], "the lying disk persisted a write");
}

#[test]
fn eio_fires_once_at_the_asked_call_of_each_kind() {
    for kind in [Kind::Write, Kind::SetLen, Kind::Sync] {
        let sim = Sim::new(2);
        sim.lock().fail = Some((kind, 2));
        let mut errors = Vec::new();
        for step in 0..3 {
            let d = sim.disk(step % 2);
            errors.push(match kind {
                Kind::Write => d.write(0, &[1; 8]).is_err(),
                Kind::SetLen => d.set_len(64).is_err(),
                Kind::Sync => d.sync_data().is_err(),
            });
        }
        assert_eq!(errors, [false, true, false], "{kind:?}");
        assert_eq!(
            sim.lock().faults,
            vec![1],
            "{kind:?}: fired once, on disk 1"
        );
    }
}
