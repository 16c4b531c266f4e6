//! A run's bloom filter: `hashes` probes a key by double hashing of two crc32s of it, over
//! a bit array stored whole in the run's meta. A point read of a key the run does not hold
//! costs a probe, not a block read, ~99 % of the time.
//!
//! Invariant: every key inserted passes [`Bloom::may_contain`] (no false negatives), at
//! every size a filter is folded to.
//! Invariant: the probes are the format's rule, `h1 + i·h2 mod bits` (`docs/FORMAT.md`):
//! a filter any build wrote answers the same.
//! Invariant: no I/O.

/// Bloom filter bits per key. Why 10: with [`BLOOM_HASHES`] hashes, a key a run does not
/// hold passes its filter ~1 % of the time, so a read of a key in none of `n` runs costs
/// about `n / 100` block reads.
pub(super) const BLOOM_BITS_PER_KEY: u64 = 10;
/// Hashes per key in the bloom filter (the optimum for 10 bits a key is ~7).
pub(super) const BLOOM_HASHES: u8 = 7;

/// A bloom filter over a run's keys: `hashes` probes by double hashing of two crc32s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bloom {
    /// Probes per key.
    pub(super) hashes: u8,
    /// The filter, bit `i` at `bits[i / 8] & (1 << (i % 8))`.
    pub(super) bits: Vec<u8>,
}

/// The two base hashes of `key` (crc32 from two seeds; the second forced odd, so the
/// probes step through every bit).
pub(super) fn key_hashes(key: &[u8]) -> (u32, u32) {
    let mut a = crc32fast::Hasher::new_with_initial(0x5bd1_e995);
    a.update(key);
    let mut b = crc32fast::Hasher::new_with_initial(0x1b87_3593);
    b.update(key);
    (a.finalize(), b.finalize() | 1)
}

/// The bit count of a filter to be folded ([`Bloom::fold_for`]) that holds at least `want`
/// bits: `q · 2^f`, `q` odd and at least ~1,000, `f ≥ 3` (whole bytes at every fold).
///
/// Why not a power of two: the two base hashes are crc32s of the same key from two seeds,
/// and crc32 is affine, so for keys of one length `h1 ^ h2` is one constant. Modulo a power
/// of two `h2` is then a function of `h1`, every probe of a key follows from `h1 mod m`,
/// and an absent key passes ~8–10 % of the time instead of ~1 %. A large odd factor mixes
/// in every bit of the hashes
/// (`writer::tests::a_bounded_run_passes_few_absent_keys_of_one_length`).
pub(super) fn foldable_bits(want: u64) -> u64 {
    let want = want.max(64);
    let f = (u64::BITS - want.leading_zeros()).saturating_sub(11).max(3);
    let q = want.div_ceil(1 << f) | 1;
    q << f
}

impl Bloom {
    /// The filter of the keys whose base hashes are `hashes`, at [`BLOOM_BITS_PER_KEY`]
    /// bits a key (at least 64 bits, a whole number of bytes).
    pub(super) fn with_keys(hashes: impl ExactSizeIterator<Item = (u32, u32)>) -> Self {
        let bit_count = (hashes.len() as u64 * BLOOM_BITS_PER_KEY).max(64);
        let mut bloom = Bloom::empty(bit_count.next_multiple_of(8));
        hashes.for_each(|h| bloom.insert(h));
        bloom
    }

    /// An empty filter of `bit_count` bits (a multiple of 8).
    pub(super) fn empty(bit_count: u64) -> Self {
        debug_assert_eq!(bit_count % 8, 0);
        Bloom {
            hashes: BLOOM_HASHES,
            bits: vec![0; (bit_count / 8) as usize],
        }
    }

    /// Sets the bits of the key whose base hashes are `h`.
    pub(super) fn insert(&mut self, h: (u32, u32)) {
        let bit_count = self.bits.len() as u64 * 8;
        for bit in probes(self.hashes, bit_count, h) {
            self.bits[(bit / 8) as usize] |= 1 << (bit % 8);
        }
    }

    /// Halves the filter while the half keeps at least [`BLOOM_BITS_PER_KEY`] bits for
    /// each of `keys` keys (and 64 bits) and a whole number of bytes, OR-ing the upper half
    /// onto the lower. Exact: a probe lands on `p mod m`, and for an even `m`,
    /// `(p mod m) mod m/2 = p mod m/2`, so the folded filter is the one built at `m/2`.
    pub(super) fn fold_for(&mut self, keys: u64) {
        let want_bits = keys.saturating_mul(BLOOM_BITS_PER_KEY).max(64);
        while self.bits.len().is_multiple_of(2) && (self.bits.len() as u64 / 2) * 8 >= want_bits {
            let half = self.bits.len() / 2;
            let (low, high) = self.bits.split_at_mut(half);
            for (l, h) in low.iter_mut().zip(high.iter()) {
                *l |= *h;
            }
            self.bits.truncate(half);
        }
    }

    /// False when the filter proves `key` was never inserted.
    pub(super) fn may_contain(&self, key: &[u8]) -> bool {
        probes(self.hashes, self.bits.len() as u64 * 8, key_hashes(key))
            .all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }
}

/// The bits a key's hashes `(h1, h2)` set in a filter of `bit_count` bits:
/// `h1 + i·h2 mod bit_count` for `i` in `0..hashes` (double hashing; the format's rule).
///
/// Stepped rather than divided: `(h1 + i·h2) mod m = ((h1 mod m) + i·(h2 mod m)) mod m`, so
/// each probe adds `h2 mod m` to the last and wraps at most once (both are below `m`). Two
/// divisions a key instead of `hashes`: a merge inserts every key of its output, and a
/// 64-bit division a probe would be most of an insert's time.
fn probes(hashes: u8, bit_count: u64, (h1, h2): (u32, u32)) -> impl Iterator<Item = u64> {
    let step = u64::from(h2) % bit_count;
    let mut bit = u64::from(h1) % bit_count;
    (0..hashes).map(move |_| {
        let this = bit;
        bit += step;
        if bit >= bit_count {
            bit -= bit_count;
        }
        debug_assert!(bit < bit_count, "invariant: a probe lies in the filter");
        this
    })
}

#[cfg(test)]
mod tests {
    use quickcheck::QuickCheck;

    use super::*;

    /// A filter built for a bound and folded down is bit for bit the filter built at the
    /// folded size (a fold that dropped the upper half, or kept the wrong bits, differs),
    /// and it is folded as far as whole bytes and 10 bits a key allow.
    #[test]
    fn a_folded_filter_is_the_filter_built_at_its_size() {
        for (keys, bound) in [
            (0u32, 0u64),
            (5, 5),
            (1_000, 1_000),
            (1_000, 64_000),
            (3_000, 3_001),
            (20_000, 100_000),
        ] {
            let hashes: Vec<(u32, u32)> = (0..keys).map(|n| key_hashes(&n.to_le_bytes())).collect();
            let mut folded = Bloom::empty(foldable_bits(bound * BLOOM_BITS_PER_KEY));
            hashes.iter().for_each(|h| folded.insert(*h));
            folded.fold_for(u64::from(keys));
            let bits = folded.bits.len() as u64 * 8;
            let want = (u64::from(keys) * BLOOM_BITS_PER_KEY).max(64);
            assert!(
                bits >= want,
                "{keys} keys under a bound of {bound}: {bits} bits"
            );
            assert!(
                !bits.is_multiple_of(16) || bits / 2 < want,
                "{keys} keys under a bound of {bound}: {bits} bits could fold again"
            );
            let mut direct = Bloom::empty(bits);
            hashes.iter().for_each(|h| direct.insert(*h));
            assert_eq!(folded, direct, "{keys} keys under a bound of {bound}");
        }
        // By hand: 100,000 keys' bound is 1,000,000 bits → 1,955 · 2^9 = 1,000,960; 20,000
        // keys want 200,000: halved twice, to 250,240.
        assert_eq!(foldable_bits(1_000_000), 1_000_960);
    }

    #[test]
    fn the_bloom_filter_passes_few_absent_keys() {
        let keys: Vec<Vec<u8>> = (0..20_000u32).map(|n| n.to_be_bytes().to_vec()).collect();
        let bloom = Bloom::with_keys(
            keys.iter()
                .map(|k| key_hashes(k))
                .collect::<Vec<_>>()
                .into_iter(),
        );
        assert!(keys.iter().all(|k| bloom.may_contain(k)));
        let passed = (20_000..120_000u32)
            .filter(|n| bloom.may_contain(&n.to_be_bytes()))
            .count();
        // ~1 % expected at 10 bits a key; 2 % is the bound a broken filter would pass.
        assert!(passed < 2_000, "{passed} of 100,000 absent keys passed");
    }

    /// The stepped probes are the format's rule, `h1 + i·h2 mod m` for `i` in `0..hashes`
    /// (written here from the rule, not from `probes`): a filter any build wrote answers
    /// the same.
    #[test]
    fn bloom_probes_follow_the_formats_double_hashing() {
        fn rule(hashes: u8, m: u64, (h1, h2): (u32, u32)) -> Vec<u64> {
            (0..u64::from(hashes))
                .map(|i| (u64::from(h1) + i * u64::from(h2)) % m)
                .collect()
        }
        fn prop(hashes: u8, m: u64, h1: u32, h2: u32) -> bool {
            let m = m.max(1);
            probes(hashes, m, (h1, h2)).collect::<Vec<_>>() == rule(hashes, m, (h1, h2))
        }
        QuickCheck::new()
            .tests(20_000)
            .quickcheck(prop as fn(u8, u64, u32, u32) -> bool);
        // Small filters, where the steps wrap most, and the extremes of the hashes.
        for m in 1..=300u64 {
            for h in [(0, 1), (u32::MAX, u32::MAX), (7, 0x8000_0001), (299, 300)] {
                assert_eq!(
                    probes(BLOOM_HASHES, m, h).collect::<Vec<_>>(),
                    rule(BLOOM_HASHES, m, h)
                );
            }
        }
    }
}
