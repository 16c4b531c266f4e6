use super::*;

fn p(s: &str) -> &Path {
    Path::new(s)
}

#[test]
fn unsynced_directory_ops_are_lost_and_synced_ones_kept() {
    let fs = SimFs::new();
    fs.create_dir_all(p("/h")).unwrap();
    fs.sync_dir(p("/")).unwrap();
    let f = fs
        .open_file(p("/h/a.tmp"), OpenMode::CreateTruncate)
        .unwrap();
    f.write_at(0, b"data").unwrap();
    f.sync_all().unwrap();
    fs.rename(p("/h/a.tmp"), p("/h/a")).unwrap();
    assert_eq!(fs.pending_dir_ops(), 2);
    let lost = fs.crash_image(DirFate::DropAll, FileFate::KeepAll);
    assert_eq!(lost.list(p("/h")), Vec::<String>::new());
    let kept = fs.crash_image(DirFate::KeepAll, FileFate::DropAll);
    assert_eq!(kept.list(p("/h")), ["a"]);
    assert_eq!(kept.read(p("/h/a")).unwrap(), b"data");
    // The rename alone (its create lost) still links the synced file.
    let rename_only = fs.crash_image(DirFate::Mask(0b10), FileFate::DropAll);
    assert_eq!(rename_only.list(p("/h")), ["a"]);
    // The create alone: the temporary name.
    let create_only = fs.crash_image(DirFate::Prefix(1), FileFate::DropAll);
    assert_eq!(create_only.list(p("/h")), ["a.tmp"]);
    fs.sync_dir(p("/h")).unwrap();
    let synced = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    assert_eq!(synced.read(p("/h/a")).unwrap(), b"data");
}

#[test]
fn unsynced_file_bytes_are_lost_and_a_lost_mkdir_loses_the_subtree() {
    let fs = SimFs::new();
    fs.create_dir_all(p("/h/sub")).unwrap();
    fs.sync_dir(p("/")).unwrap();
    fs.sync_dir(p("/h")).unwrap();
    let f = fs.open_file(p("/h/sub/x"), OpenMode::CreateOrOpen).unwrap();
    fs.sync_dir(p("/h/sub")).unwrap();
    f.write_at(0, &[7; 1024]).unwrap();
    let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    assert_eq!(img.read(p("/h/sub/x")).unwrap(), Vec::<u8>::new());
    let img = fs.crash_image(DirFate::DropAll, FileFate::KeepAll);
    assert_eq!(img.read(p("/h/sub/x")).unwrap(), vec![7; 1024]);
    let fs2 = SimFs::new();
    fs2.create_dir_all(p("/h")).unwrap();
    let f = fs2.open_file(p("/h/x"), OpenMode::CreateOrOpen).unwrap();
    fs2.sync_dir(p("/h")).unwrap();
    f.sync_all().unwrap();
    // `/h` itself was never synced into `/`: losing it loses `/h/x`.
    let img = fs2.crash_image(DirFate::DropAll, FileFate::KeepAll);
    assert!(!img.exists(p("/h")).unwrap());
}

#[test]
fn the_cut_op_and_every_later_one_fail() {
    let fs = SimFs::new();
    fs.set_cut_at(Some(2));
    let f = fs.open_file(p("/a"), OpenMode::CreateOrOpen).unwrap();
    assert!(f.write_at(0, b"x").is_err());
    assert!(fs.is_dead());
    assert!(f.len().is_err());
    assert!(fs.sync_dir(p("/")).is_err());
    assert_eq!(fs.ops(), 2);
    // The write in flight may have landed.
    let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    assert_eq!(img.read(p("/a")).unwrap(), b"x");
}

#[test]
fn an_injected_eio_fails_one_op_and_the_machine_stays_up() {
    let fs = SimFs::new();
    let f = fs.open_file(p("/a"), OpenMode::CreateOrOpen).unwrap(); // op 1
    fs.sync_dir(p("/")).unwrap(); // op 2
    fs.set_fail_at(Some(3));
    let e = f.write_at(0, b"lost").unwrap_err(); // op 3: fails
    assert_eq!(e.raw_os_error(), Some(5), "EIO: {e}");
    assert!(!fs.is_dead());
    // A failed write wrote nothing: not in the live view, nothing pending.
    assert_eq!(fs.read(p("/a")).unwrap(), b"");
    assert_eq!(fs.pending_file_ops(), 0);
    f.write_at(0, b"kept").unwrap(); // op 4: works
    f.sync_data().unwrap();
    assert_eq!(
        fs.faults(),
        [SimFault {
            op_index: 3,
            op: SimOp::Write,
            path: PathBuf::from("/a"),
        }]
    );
    assert_eq!(fs.stats().log[2], (SimOp::Write, PathBuf::from("/a")));
    let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    assert_eq!(img.read(p("/a")).unwrap(), b"kept");
    // A failed directory op does nothing either.
    fs.set_fail_at(Some(fs.ops() + 1));
    assert!(fs.rename(p("/a"), p("/b")).is_err());
    assert_eq!(fs.list(p("/")), ["a"]);
    assert_eq!(fs.pending_dir_ops(), 0);
    assert_eq!(fs.faults().len(), 2);
}

#[test]
fn a_retried_sync_after_a_failed_one_does_not_make_the_lost_writes_durable() {
    for kind in [SimOp::SyncData, SimOp::SyncAll] {
        let fs = SimFs::new();
        let f = fs.open_file(p("/seg"), OpenMode::CreateOrOpen).unwrap();
        fs.sync_dir(p("/")).unwrap();
        f.write_at(0, b"aaaa").unwrap();
        f.sync_data().unwrap();
        f.write_at(4, b"bbbb").unwrap();
        fs.set_fail_at(Some(fs.ops() + 1));
        let sync = |f: &dyn FsFile| match kind {
            SimOp::SyncData => f.sync_data(),
            _ => f.sync_all(),
        };
        assert_eq!(sync(&*f).unwrap_err().raw_os_error(), Some(5));
        assert_eq!(fs.faults().len(), 1, "{kind:?}: the fault fired once");
        // Reads still see the lost bytes (the page cache kept them)...
        assert_eq!(fs.read(p("/seg")).unwrap(), b"aaaabbbb");
        // ...and the retry "succeeds".
        sync(&*f).unwrap();
        f.write_at(8, b"cccc").unwrap();
        sync(&*f).unwrap();
        for (dirs, files) in [
            (DirFate::DropAll, FileFate::DropAll),
            (DirFate::KeepAll, FileFate::KeepAll),
            (DirFate::KeepAll, FileFate::Random(7)),
        ] {
            // The lost bytes never reach the disk; those written after the failure do.
            let img = fs.crash_image(dirs, files);
            assert_eq!(
                img.read(p("/seg")).unwrap(),
                b"aaaa\0\0\0\0cccc",
                "{kind:?} {files:?}"
            );
        }
    }
}

#[test]
fn a_failed_sync_dir_loses_its_pending_entries_for_good() {
    let fs = SimFs::new();
    fs.create_dir_all(p("/h")).unwrap();
    fs.sync_dir(p("/")).unwrap();
    let f = fs.open_file(p("/h/a"), OpenMode::CreateOrOpen).unwrap();
    f.sync_all().unwrap();
    fs.set_fail_at(Some(fs.ops() + 1));
    assert!(fs.sync_dir(p("/h")).is_err());
    assert_eq!(fs.list(p("/h")), ["a"], "reads still see the entry");
    drop(fs.open_file(p("/h/b"), OpenMode::CreateOrOpen).unwrap());
    fs.sync_dir(p("/h")).unwrap();
    // `b`, created after the failure, is durable; `a` is not, the retry notwithstanding.
    let img = fs.crash_image(DirFate::KeepAll, FileFate::KeepAll);
    assert_eq!(img.list(p("/h")), ["b"]);
}

#[test]
fn without_faults_a_sync_makes_the_live_view_durable() {
    // The pending-op replay a sync now does equals the live view when nothing was lost.
    let fs = SimFs::new();
    let f = fs.open_file(p("/x"), OpenMode::CreateOrOpen).unwrap();
    f.write_at(0, &[1; 700]).unwrap();
    f.set_len(300).unwrap();
    f.write_at(600, b"tail").unwrap();
    f.sync_data().unwrap();
    fs.rename(p("/x"), p("/y")).unwrap();
    drop(fs.open_file(p("/z"), OpenMode::CreateOrOpen).unwrap());
    fs.remove_file(p("/z")).unwrap();
    fs.sync_dir(p("/")).unwrap();
    let img = fs.crash_image(DirFate::DropAll, FileFate::DropAll);
    assert_eq!(img.fingerprint(), fs.fingerprint());
    assert_eq!(img.list(p("/")), ["y"]);
    assert!(fs.faults().is_empty());
}

#[test]
fn a_lock_excludes_other_handles_until_dropped() {
    let fs = SimFs::new();
    let a = fs.open_file(p("/LOCK"), OpenMode::CreateOrOpen).unwrap();
    let b = fs.open_file(p("/LOCK"), OpenMode::CreateOrOpen).unwrap();
    assert!(a.try_lock_exclusive().unwrap());
    assert!(!b.try_lock_exclusive().unwrap());
    drop(a);
    assert!(b.try_lock_exclusive().unwrap());
}
