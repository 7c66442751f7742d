//! Address -> node index, looked up on every send.
//!
//! A hash map with a small multiply-rotate hasher: an address is a few machine
//! words, and SipHash or a B-tree of `SocketAddr` comparisons cost several times
//! more per message. Only lookups are made, never iteration, so the map's order
//! cannot reach a simulation's results.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::NodeIdx;
use crate::machine::NodeAddr;

/// The live nodes by address.
pub(crate) type AddrMap = HashMap<NodeAddr, NodeIdx, BuildHasherDefault<WordHasher>>;

/// Folds each written word into the state with a rotate, xor and multiply
/// (the scheme of rustc's FxHasher); enough spread for a hash table, not for
/// anything adversarial.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WordHasher(u64);

const K: u64 = 0xf135_7aea_2e62_a9c5;

impl WordHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(K);
    }
}

impl Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("chunks of 8")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        // The high bits pick the bucket group in hashbrown: fold the low ones in.
        self.0.rotate_left(20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::hash::BuildHasher;

    #[test]
    fn maps_addresses_and_spreads_their_hashes() {
        let mut m = AddrMap::default();
        for i in 0..10_000u32 {
            m.insert(NodeAddr::loopback(i, 4000), i as usize);
        }
        for i in (0..10_000u32).step_by(7) {
            assert_eq!(m.get(&NodeAddr::loopback(i, 4000)), Some(&(i as usize)));
        }
        assert_eq!(m.get(&NodeAddr::loopback(10_001, 4000)), None);
        assert_eq!(m.remove(&NodeAddr::loopback(3, 4000)), Some(3));
        let b = BuildHasherDefault::<WordHasher>::default();
        let top: BTreeSet<u64> = (0..4096u32).map(|i| b.hash_one(NodeAddr::loopback(i, 4000)) >> 52).collect();
        assert!(top.len() > 2000, "the top 12 bits of 4096 hashes take {} values", top.len());
    }
}
