//! The allocator of the `flushpoint` tool and of the `compare` bench (which includes this
//! file, so that both run every engine on the same allocator): mimalloc, told to keep the
//! memory it frees.
//!
//! Why mimalloc: the journal engine frees on its applier thread the keys and values the block
//! loop allocated (a window's writes, once applied). glibc's `free` of another thread's block
//! took 25 % of the applier's CPU at 30k light blocks (`perf`), and a 100k-block journal sync
//! took 26.7–29.1 s against 18.5–21.0 s with mimalloc (`benches/compare/PERFORMANCE.md`,
//! "The allocator"). The library leaves the choice to the embedder.
//!
//! Why keep freed memory: by default mimalloc gives pages it finds free back to the OS after
//! a second. The block loop then faults them back in (zeroed, as transparent huge pages) for the
//! next window: 77k–94k page faults and ~10 % of the block loop's CPU (`clear_page_erms`) in
//! an 8 s journal sync, against ~1.1k faults with purging off (PERFORMANCE.md, "Freed memory
//! kept"). Peak RSS moved little in those runs: 1,001–1,083 MiB purging, 1,084–1,094 kept.

/// mimalloc's `mi_option_purge_delay` (the position in its `mi_option_e`, the same in its v2
/// and v3 headers; the test below checks that it reads as mimalloc's default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc v3's default purge delay, in milliseconds (its `src/options.c`; the header's
/// "(=10)" is v2's).
const MI_DEFAULT_PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// A purge delay of -1: mimalloc never gives freed pages back to the OS.
const NEVER_PURGE: std::ffi::c_long = -1;

/// The environment variable by which mimalloc takes its purge delay: when it is set, the
/// operator's value stands.
pub const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// The global allocator: mimalloc.
pub type Global = mimalloc::MiMalloc;

/// Tells mimalloc to keep the pages it frees, unless the operator set [`PURGE_DELAY_ENV`] or
/// the option does not read as mimalloc's default (a mimalloc that numbers its options
/// differently is left as it is). Call it first thing in `main`, before other threads start.
pub fn keep_freed_memory() {
    if std::env::var_os(PURGE_DELAY_ENV).is_some() {
        return;
    }
    // SAFETY: `mi_option_get` and `mi_option_set` read and write one of mimalloc's option
    // slots; they take no pointers and are called before the program starts other threads.
    #[allow(unsafe_code)]
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) == MI_DEFAULT_PURGE_DELAY_MS {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, NEVER_PURGE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option number names the purge delay: it reads as mimalloc's default before, and
    /// as "never" after. A wrong number (planted: 14, the deprecated eager-commit delay)
    /// reads otherwise, and this test fails.
    #[test]
    fn the_purge_delay_option_reads_as_mimallocs_default_then_never() {
        if std::env::var_os(PURGE_DELAY_ENV).is_some() {
            eprintln!("{PURGE_DELAY_ENV} is set; the default cannot be read");
            return;
        }
        #[allow(unsafe_code)]
        let read = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        let before = read();
        keep_freed_memory();
        let after = read();
        // Other tests may run first in this process and have set it already.
        assert!(
            before == MI_DEFAULT_PURGE_DELAY_MS || before == NEVER_PURGE,
            "option {MI_OPTION_PURGE_DELAY} read {before}: not mimalloc's purge delay"
        );
        assert_eq!(after, NEVER_PURGE);
    }
}
