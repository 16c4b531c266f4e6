//! Key layout. One prefix byte names the record type; heights are u64 big-endian so byte
//! order is height order; part indexes are u32 big-endian.
//!
//! | database | key | bytes | record |
//! |---|---|---|---|
//! | block store | `0x01 ‖ h` | 9 | block meta of height h |
//! | block store | `0x02 ‖ h ‖ i` | 13 | part i of block h |
//! | block store | `0x03 ‖ h` | 9 | canonical commit for height h (saved with block h+1) |
//! | block store | `0x04 ‖ h` | 9 | seen commit for height h |
//! | block store | `0x05 ‖ hash` | 33 | hash → height index |
//! | block store | `0x06` | 1 | block store state {base, height} |
//! | block store | `0x07` | 1 | flush record {from, to} |
//! | state | `0x10 ‖ h` | 9 | results of block h |
//! | state | `0x11` | 1 | consensus state |
//! | state | `0x12 ‖ h` | 9 | history slot 0 at height h (demo: validator set), or a pointer to its last change |
//! | state | `0x13 ‖ h` | 9 | history slot 1 at height h (demo: consensus params), or a pointer |
//! | state | `0x14` | 1 | the genesis hash the home was created with |
//! | state | `0x15` | 1 | the state store's base (heights below it are pruned) |
//! | state | `0x16 ‖ h` | 9 | history slot 2 at height h, or a pointer |
//! | state | `0x17 ‖ h` | 9 | history slot 3 at height h, or a pointer |
//! | app (demo) | `0x20 ‖ key` | 1+n | an application value |
//! | app (demo) | `0x21` | 1 | the app's meta {height, app hash} |
//! | app (demo) | `0x22 ‖ h` | 9 | the undo record of block h |

/// Prefix of block meta keys.
pub const BLOCK_META: u8 = 0x01;
/// Prefix of block part keys.
pub const BLOCK_PART: u8 = 0x02;
/// Prefix of canonical commit keys.
pub const BLOCK_COMMIT: u8 = 0x03;
/// Prefix of seen commit keys.
pub const SEEN_COMMIT: u8 = 0x04;
/// Prefix of the hash → height index.
pub const HASH_INDEX: u8 = 0x05;
/// The block store state key.
pub const BLOCK_STORE_STATE: u8 = 0x06;
/// The flush record key.
pub const FLUSH_RECORD: u8 = 0x07;
/// Prefix of block results keys.
pub const RESULTS: u8 = 0x10;
/// The consensus state key.
pub const STATE: u8 = 0x11;
/// Prefix of history slot 0's keys (the demo chain's validator sets).
pub const VALIDATORS: u8 = 0x12;
/// Prefix of history slot 1's keys (the demo chain's consensus params).
pub const PARAMS: u8 = 0x13;
/// Prefix of history slot 2's keys.
pub const HISTORY_2: u8 = 0x16;
/// Prefix of history slot 3's keys.
pub const HISTORY_3: u8 = 0x17;

/// The key prefix of each state history slot, by index.
pub const HISTORY_PREFIXES: [u8; 4] = [VALIDATORS, PARAMS, HISTORY_2, HISTORY_3];
/// The genesis hash key.
pub const GENESIS: u8 = 0x14;
/// The state store's base key (pruned below this height).
pub const STATE_STORE_BASE: u8 = 0x15;
/// Every key prefix of the block store's database (the first byte of each of its keys).
pub const BLOCK_STORE_PREFIXES: [u8; 7] = [
    BLOCK_META,
    BLOCK_PART,
    BLOCK_COMMIT,
    SEEN_COMMIT,
    HASH_INDEX,
    BLOCK_STORE_STATE,
    FLUSH_RECORD,
];
/// Every key prefix of the state's database.
pub const STATE_PREFIXES: [u8; 8] = [
    RESULTS,
    STATE,
    VALIDATORS,
    PARAMS,
    HISTORY_2,
    HISTORY_3,
    GENESIS,
    STATE_STORE_BASE,
];
/// Prefix of demo-app data keys.
pub const APP_DATA: u8 = 0x20;
/// The demo app's meta key.
pub const APP_META: u8 = 0x21;
/// Prefix of the demo app's undo records.
pub const APP_UNDO: u8 = 0x22;

/// `prefix ‖ height`.
pub fn height_key(prefix: u8, height: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = prefix;
    k[1..].copy_from_slice(&height.to_be_bytes());
    k
}

/// `0x02 ‖ height ‖ index`.
pub fn part_key(height: u64, index: u32) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[0] = BLOCK_PART;
    k[1..9].copy_from_slice(&height.to_be_bytes());
    k[9..].copy_from_slice(&index.to_be_bytes());
    k
}

/// `0x05 ‖ hash`.
pub fn hash_key(hash: &[u8; 32]) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[0] = HASH_INDEX;
    k[1..].copy_from_slice(hash);
    k
}

/// A one-byte singleton key.
pub fn singleton(prefix: u8) -> [u8; 1] {
    [prefix]
}

/// The height a key names, if its layout has one.
pub fn height_of(key: &[u8]) -> Option<u64> {
    match *key.first()? {
        BLOCK_META | BLOCK_PART | BLOCK_COMMIT | SEEN_COMMIT | RESULTS | VALIDATORS | PARAMS
        | HISTORY_2 | HISTORY_3 | APP_UNDO
            if key.len() >= 9 =>
        {
            Some(u64::from_be_bytes(key[1..9].try_into().ok()?))
        }
        _ => None,
    }
}

/// The first key after every key starting with `prefix` (for range ends).
pub fn prefix_end(prefix: u8) -> [u8; 1] {
    [prefix + 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heights_sort_in_byte_order() {
        let mut ks: Vec<_> = [256u64, 1, 255, 70_000, 2]
            .iter()
            .map(|h| height_key(1, *h))
            .collect();
        ks.sort();
        let hs: Vec<_> = ks.iter().map(|k| height_of(k).unwrap()).collect();
        assert_eq!(hs, vec![1, 2, 255, 256, 70_000]);
        assert_eq!(height_of(&part_key(7, 3)), Some(7));
        assert_eq!(height_of(&singleton(STATE)), None);
    }
}
