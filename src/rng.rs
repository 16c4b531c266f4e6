//! splitmix64: the crate's one seeded generator of pseudo-random numbers — the demo chain's
//! transactions, the simulated file system's torn-write fates, and (through
//! `flushpoint::testing`) the tool's crash plans, the benches' keys and the tests' data.
//!
//! Invariant: the outputs are Steele, Lea and Flood's splitmix64 bit for bit, on every
//! platform: a seed replays the same blocks, fates and plans forever.
//! Invariant: imports nothing from the crate (layer 0).

/// splitmix64's increment: 2^64 / φ, odd.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64 of `x`: the output of a generator whose state was `x` (it mixes `x + γ`). A
/// hash of `x` too: nearby inputs give unrelated outputs.
pub const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The next output of the splitmix64 stream whose state is `state`, and the state advanced
/// (`state + γ`): seeded with `s`, the stream is `splitmix64(s)`, `splitmix64(s + γ)`, ….
///
/// Only the test doubles step a stream (a `demo`-only build has no use for it).
#[cfg(any(test, feature = "testkit", doc))]
pub fn splitmix64_next(state: &mut u64) -> u64 {
    let out = splitmix64(*state);
    *state = state.wrapping_add(GAMMA);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference outputs for seed 1234567 (from the algorithm's published C code).
    #[test]
    fn the_stream_matches_the_reference_outputs() {
        let mut s = 1_234_567;
        let got: Vec<u64> = (0..5).map(|_| splitmix64_next(&mut s)).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }
}
