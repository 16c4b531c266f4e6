//! The allocator of the `flushpoint` tool and of the `compare` bench (which includes this
//! file, so that both run every engine on the same allocator): mimalloc, which
//! [`configure`] sets to give pages freed for a second back to the OS, to take large
//! objects from the OS and give them back at once, and not to back its memory with
//! transparent huge pages. The library leaves the choice of allocator to the embedder.
//!
//! Why mimalloc: the journal engine frees on its applier thread the keys and values the
//! block loop allocated (a window's writes, once applied). glibc's `free` of another
//! thread's block takes about a quarter of the applier's CPU, and a 100k-block journal sync
//! runs about 40 % slower on glibc (`benches/compare/PERFORMANCE.md`).
//!
//! Why freed pages go back after a second: a light window fills in about half a second, so
//! the pages one window frees are taken again by the next before they go (no page faults on
//! the block loop for them); pages free for longer are spans no window reuses. Giving them
//! back lowers peak RSS at 300k light blocks from 329 to 276 MiB (with huge pages off and
//! the node's compact held events) for 1–6 % of block-sync speed.
//!
//! Why large objects from the OS: a window's large buffers (its entry table and key order,
//! a unit's op vector: 2–14 MiB each, sized by the window) change size from one window to
//! the next. Kept in mimalloc's arena, a freed span the next, larger buffer does not fit
//! stays committed beside the small pages around it, and the arena grows all run long.
//! Mapped and unmapped per object, they leave RSS when freed ([`ARENA_MAX_OBJECT_KIB`]).
//!
//! Why no transparent huge pages: mimalloc advises the kernel to back its arena with 2 MiB
//! pages, so a page touched anywhere is resident whole, the arena's partly used spans hold
//! whole huge pages, and purged memory faults back in 2 MiB at a time, zeroed. Without
//! them peak RSS at 300k light blocks is about a tenth lower at the same speed.
//!
//! Invariant: an option the operator set through mimalloc's environment variable stands;
//! an option that does not read as mimalloc's default (another version's numbering) is
//! left as it is.

/// mimalloc's `mi_option_purge_delay` (the position in its `mi_option_e`, the same in its v2
/// and v3 headers; the test below checks that it reads as mimalloc's default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc v3's default purge delay, in milliseconds (its `src/options.c`; the header's
/// "(=10)" is v2's).
const MI_DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// The purge delay this program runs with, in milliseconds: a page freed for this long goes
/// back to the OS. Why a second: a light window fills in ~0.5 s, so the pages one window
/// frees are taken again by the next before they are purged (no page faults on the block
/// loop for them), and what stays free longer is memory no window reuses. It is mimalloc
/// v3's default; set here so that a mimalloc with another default (v2's is 10 ms) runs as
/// measured.
pub const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// The environment variable by which mimalloc takes its purge delay: when it is set, the
/// operator's value stands.
pub const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// The global allocator: mimalloc.
pub type Global = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_max_object_size`: objects above it (KiB) are mapped from the
/// OS and unmapped when freed (v3 only; the test below checks that it reads as v3's
/// default).
const MI_OPTION_ARENA_MAX_OBJECT_SIZE: libmimalloc_sys::mi_option_t = 45;

/// mimalloc v3's default for it, in KiB: 2 GiB (`MI_DEFAULT_ARENA_MAX_OBJECT_SIZE` in its
/// `src/options.c`), so that every object of a 64-bit process is in an arena.
const MI_DEFAULT_ARENA_MAX_OBJECT_KIB: std::ffi::c_long = 2 * 1024 * 1024;

/// The largest object kept in mimalloc's arena, in KiB; larger ones are mapped from the OS.
/// Why 2 MiB: the window's buffers that change size with it are 2–14 MiB; mapped per object
/// they took peak RSS at 300k light blocks from 473 to 411 MiB at the same speed (medians of
/// 4 interleaved rounds). Below it are the window's 1 MiB chunks, a few hundred a second:
/// mapping those too (a 256 or 64 KiB bound) gave 380 MiB but 7–12 % more time.
pub const ARENA_MAX_OBJECT_KIB: std::ffi::c_long = 2 * 1024;

/// The environment variable by which mimalloc takes the largest arena object: when it is
/// set, the operator's value stands. (mimalloc reads a bare number there as bytes: write
/// `2M` or `2048K`.)
pub const ARENA_MAX_OBJECT_ENV: &str = "MIMALLOC_ARENA_MAX_OBJECT_SIZE";

/// The environment variable by which mimalloc takes whether it may use transparent huge
/// pages: when it is set, the operator's choice stands (mimalloc applies it itself, at its
/// start).
pub const ALLOW_THP_ENV: &str = "MIMALLOC_ALLOW_THP";

/// mimalloc's `mi_option_allow_thp` (v3 only; the test below checks that it reads as v3's
/// default, 1).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// mimalloc v3's default for `allow_thp`: huge pages allowed.
const MI_DEFAULT_ALLOW_THP: std::ffi::c_long = 1;

/// `allow_thp` off: mimalloc does not advise its memory to huge pages.
const NO_THP: std::ffi::c_long = 0;

/// Sets mimalloc's options for this program: freed pages back after a second
/// ([`purge_after_a_second`]), large objects from the OS ([`map_large_objects`]) and no
/// transparent huge pages ([`no_transparent_huge_pages`]). Call it first thing in `main`,
/// before other threads start.
pub fn configure() {
    purge_after_a_second();
    map_large_objects();
    no_transparent_huge_pages();
}

/// Tells the kernel not to back this process's memory with transparent huge pages, and
/// mimalloc not to ask for them, unless the operator set [`ALLOW_THP_ENV`]. (mimalloc reads
/// its own option once, when it starts, before `main`: the process flag is set here.) The
/// flag is the kernel's per-process one (`PR_SET_THP_DISABLE`), inherited by children; on a
/// system without it (not Linux) nothing changes.
fn no_transparent_huge_pages() {
    if std::env::var_os(ALLOW_THP_ENV).is_some() {
        return;
    }
    set_unless_operator_or_unknown(
        ALLOW_THP_ENV,
        MI_OPTION_ALLOW_THP,
        MI_DEFAULT_ALLOW_THP,
        NO_THP,
    );
    #[cfg(target_os = "linux")]
    // SAFETY: `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` takes integers only and sets a flag
    // of the calling process; its failure (an old kernel) leaves huge pages as they were.
    #[allow(unsafe_code)]
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`], unless the operator set
/// [`PURGE_DELAY_ENV`] or the option does not read as mimalloc's default (a mimalloc that
/// numbers its options differently is left as it is).
fn purge_after_a_second() {
    set_unless_operator_or_unknown(
        PURGE_DELAY_ENV,
        MI_OPTION_PURGE_DELAY,
        MI_DEFAULT_PURGE_DELAY_MS,
        PURGE_DELAY_MS,
    );
}

/// Tells mimalloc to map objects above [`ARENA_MAX_OBJECT_KIB`] from the OS, unless the
/// operator set [`ARENA_MAX_OBJECT_ENV`] or the option does not read as mimalloc v3's
/// default (v2 has no such option; its number 45 is out of v2's range and reads 0).
fn map_large_objects() {
    set_unless_operator_or_unknown(
        ARENA_MAX_OBJECT_ENV,
        MI_OPTION_ARENA_MAX_OBJECT_SIZE,
        MI_DEFAULT_ARENA_MAX_OBJECT_KIB,
        ARENA_MAX_OBJECT_KIB,
    );
}

/// Sets `option` to `value` when the operator did not set `env` and the option reads as
/// `default` (so a wrong option number changes nothing).
fn set_unless_operator_or_unknown(
    env: &str,
    option: libmimalloc_sys::mi_option_t,
    default: std::ffi::c_long,
    value: std::ffi::c_long,
) {
    if std::env::var_os(env).is_some() {
        return;
    }
    // SAFETY: `mi_option_get` and `mi_option_set` read and write one of mimalloc's option
    // slots (an out-of-range number is checked and ignored by mimalloc); they take no
    // pointers and are called before the program starts other threads.
    #[allow(unsafe_code)]
    unsafe {
        if libmimalloc_sys::mi_option_get(option) == default {
            libmimalloc_sys::mi_option_set(option, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option number names the purge delay: it reads as mimalloc's default before, and
    /// as [`PURGE_DELAY_MS`] after (the same on v3: this pins what was measured). A wrong
    /// number (planted: 14, the deprecated eager-commit delay) reads otherwise, and this test
    /// fails; so does a return to "never" (-1).
    #[test]
    fn the_purge_delay_option_reads_as_mimallocs_default_then_a_second() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            eprintln!("{PURGE_DELAY_ENV} is set; the default cannot be read");
            return;
        }
        #[allow(unsafe_code)]
        let read = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let before = read();
        purge_after_a_second();
        let after = read();
        // Other tests may run first in this process and have set it already.
        assert!(
            before == MI_DEFAULT_PURGE_DELAY_MS || before == PURGE_DELAY_MS,
            "option {MI_OPTION_PURGE_DELAY} read {before}: not mimalloc's purge delay"
        );
        assert_eq!(after, PURGE_DELAY_MS);
    }

    /// Anonymous resident memory of this process, in bytes (`RssAnon` of
    /// `/proc/self/status`).
    fn rss_anon_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("RssAnon in /proc/self/status");
        kib * 1024
    }

    /// Resident bytes given back when a filled object of `bytes` is freed.
    fn resident_bytes_freed_with(bytes: usize) -> u64 {
        let object = vec![1u8; bytes];
        let with = rss_anon_bytes();
        assert_eq!(object[bytes - 1], 1);
        drop(object);
        with.saturating_sub(rss_anon_bytes())
    }

    /// The option number names mimalloc v3's largest arena object: it reads as v3's default
    /// before and as ours after (planted: 44, the minimal purge size, reads 0 and the test
    /// fails). And it does what it is set for: a large object freed in the arena stays
    /// resident at once (the negative control: it is purged a second later at the earliest),
    /// and one above the option leaves at once.
    #[test]
    fn large_objects_are_mapped_from_the_os_and_leave_when_freed() {
        if std::env::var_os(ARENA_MAX_OBJECT_ENV).is_some()
            || std::env::var_os(PURGE_DELAY_ENV).is_some()
        {
            eprintln!(
                "{ARENA_MAX_OBJECT_ENV} or {PURGE_DELAY_ENV} is set; the defaults cannot be read"
            );
            return;
        }
        #[allow(unsafe_code)]
        let read = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ARENA_MAX_OBJECT_SIZE) };
        let before = read();
        // Not `configure`: the huge-pages test alone touches the process's flag.
        purge_after_a_second();
        map_large_objects();
        assert!(
            before == MI_DEFAULT_ARENA_MAX_OBJECT_KIB || before == ARENA_MAX_OBJECT_KIB,
            "option {MI_OPTION_ARENA_MAX_OBJECT_SIZE} read {before}: not mimalloc v3's largest \
             arena object"
        );
        assert_eq!(read(), ARENA_MAX_OBJECT_KIB);

        const OBJECT_BYTES: usize = 256 << 20;
        const SLACK_BYTES: u64 = 56 << 20;
        // Only this test sets the option back; the other test sets the purge delay only.
        #[allow(unsafe_code)]
        let set = |kib| unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_MAX_OBJECT_SIZE, kib);
        };
        set(MI_DEFAULT_ARENA_MAX_OBJECT_KIB);
        let kept = resident_bytes_freed_with(OBJECT_BYTES);
        set(ARENA_MAX_OBJECT_KIB);
        let given_back = resident_bytes_freed_with(OBJECT_BYTES);
        assert!(
            kept < SLACK_BYTES,
            "negative control: an object freed in the arena gave back {kept} bytes at once"
        );
        assert!(
            given_back > OBJECT_BYTES as u64 - SLACK_BYTES,
            "an object above the arena's largest gave back only {given_back} bytes"
        );
    }

    /// The process's "no transparent huge pages" flag (`PR_GET_THP_DISABLE`).
    #[cfg(target_os = "linux")]
    fn thp_disabled() -> bool {
        #[allow(unsafe_code)]
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        flag == 1
    }

    /// The option number names mimalloc v3's `allow_thp`: it reads as v3's default (1), then
    /// as ours (0; planted: 42, another option, reads 32 and fails). And the kernel's
    /// flag is what the function sets: cleared first (the negative control reads it clear),
    /// then set by the function (planted: the `prctl` call removed, the flag reads clear
    /// and the test fails).
    #[cfg(target_os = "linux")]
    #[test]
    fn transparent_huge_pages_are_turned_off_for_the_process() {
        if std::env::var_os(ALLOW_THP_ENV).is_some() {
            eprintln!("{ALLOW_THP_ENV} is set; the operator's choice stands");
            return;
        }
        #[allow(unsafe_code)]
        let read = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) };
        let before = read();
        assert_eq!(
            before, MI_DEFAULT_ALLOW_THP,
            "option {MI_OPTION_ALLOW_THP} read {before}: not mimalloc v3's allow_thp"
        );
        // Only this test touches the flag (the others call the option setters, not
        // `configure`).
        #[allow(unsafe_code)]
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
        }
        assert!(
            !thp_disabled(),
            "negative control: the flag reads set after clearing it"
        );
        no_transparent_huge_pages();
        assert!(
            thp_disabled(),
            "huge pages are still allowed after the call"
        );
        assert_eq!(read(), NO_THP);
    }
}
