//! 4K aliasing: the one copy hazard two layers steer clear of, stated once.
//!
//! A copy whose destination lies a few bytes past its source modulo 4 KiB makes every load
//! wait on an earlier store to the same low address bits. Measured on this project's
//! machines (AMD EPYC, Linux 6.18, glibc 2.36): a 64 KiB `memcpy` ran at 2.2–3.4 GB/s with
//! its destination 1–15 bytes ahead instead of 36–46, and a 64 KiB `write` into the page
//! cache at 1.7–2.5 GB/s instead of 5.8–8.7. The codec places a long payload's copy clear of it
//! ([`crate::codec::PLACED_COPY_ALIGN_BYTES`]); the file layer re-places a vectored write's
//! piece the kernel would copy inside it.

/// Bytes of a page: the span within which a copy's source and destination addresses alias.
pub(crate) const ALIAS_SPAN_BYTES: usize = 4096;

/// The largest distance, modulo [`ALIAS_SPAN_BYTES`], that a copy's destination may lie ahead
/// of its source and the copy still run slowly. Why 63: 16 bytes and more ran at full speed
/// on the machines measured; 63 covers a cache line, as the measured edge is one machine's.
pub(crate) const ALIASING_AHEAD_BYTES_MAX: usize = 63;

/// True when copying from `src` to `dst` puts the destination 1 to
/// [`ALIASING_AHEAD_BYTES_MAX`] bytes ahead of the source modulo [`ALIAS_SPAN_BYTES`].
pub(crate) fn copy_aliases(dst: usize, src: usize) -> bool {
    let ahead = dst.wrapping_sub(src) % ALIAS_SPAN_BYTES;
    (1..=ALIASING_AHEAD_BYTES_MAX).contains(&ahead)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window is 1..=63 bytes ahead, modulo a page, and nothing else (planted: `0..=63`
    /// or `1..63` fails at its edge; a destination behind its source never aliases).
    #[test]
    fn a_copy_aliases_one_to_sixty_three_bytes_ahead_modulo_a_page() {
        let src = 0x7f00_0000_1000usize + 5;
        for ahead in 0..3 * ALIAS_SPAN_BYTES {
            let want = (1..=63).contains(&(ahead % 4096));
            assert_eq!(copy_aliases(src + ahead, src), want, "{ahead} bytes ahead");
        }
        assert!(!copy_aliases(src - 1, src), "one byte behind");
        assert!(
            copy_aliases(src + 4096 + 1, src),
            "a page and one byte ahead"
        );
    }
}
