//! 160-bit identifiers on the ring modulo 2^160.
//!
//! Node ids are SHA-1 of the node's advertised `ip:port`, resource keys SHA-1 of the
//! resource string, process keys SHA-1 of (job id, rank). All arithmetic wraps
//! modulo 2^160, as Chord needs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

/// Number of bits in an identifier.
pub const ID_BITS: u32 = 160;
/// Number of bytes in an identifier.
pub const ID_BYTES: usize = 20;

/// A point on the identifier ring, stored big-endian so that byte order is numeric order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub struct Id([u8; ID_BYTES]);

/// An identifier string that is not 40 hexadecimal digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an identifier is 40 hexadecimal digits, got {0:?}")]
pub struct ParseIdError(String);

impl Id {
    /// The identifier 0.
    pub const ZERO: Id = Id([0; ID_BYTES]);
    /// The largest identifier, 2^160 - 1.
    pub const MAX: Id = Id([0xff; ID_BYTES]);

    /// An identifier from its 20 big-endian bytes.
    pub const fn from_bytes(bytes: [u8; ID_BYTES]) -> Self {
        Id(bytes)
    }

    /// The 20 big-endian bytes.
    pub const fn as_bytes(&self) -> &[u8; ID_BYTES] {
        &self.0
    }

    /// SHA-1 of arbitrary bytes.
    pub fn hash(data: impl AsRef<[u8]>) -> Self {
        Id(Sha1::digest(data.as_ref()).into())
    }

    /// SHA-1 of several parts, fed in order (no separator is added).
    pub fn hash_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut h = Sha1::new();
        for p in parts {
            h.update(p);
        }
        Id(h.finalize().into())
    }

    /// The value 2^i (i < 160).
    ///
    /// # Panics
    /// If `i >= 160`: a caller bug, never reachable from input.
    pub fn pow2(i: u32) -> Self {
        assert!(i < ID_BITS, "2^{i} does not fit in 160 bits");
        let mut b = [0u8; ID_BYTES];
        let byte = ID_BYTES - 1 - (i / 8) as usize;
        b[byte] = 1 << (i % 8);
        Id(b)
    }

    /// `self + other` modulo 2^160.
    pub fn wrapping_add(self, other: Id) -> Id {
        let (a, b) = (self.limbs(), other.limbs());
        let (lo, carry) = a.1.overflowing_add(b.1);
        Id::from_limbs(a.0.wrapping_add(b.0).wrapping_add(u32::from(carry)), lo)
    }

    /// `self - other` modulo 2^160.
    pub fn wrapping_sub(self, other: Id) -> Id {
        let (a, b) = (self.limbs(), other.limbs());
        let (lo, borrow) = a.1.overflowing_sub(b.1);
        Id::from_limbs(a.0.wrapping_sub(b.0).wrapping_sub(u32::from(borrow)), lo)
    }

    /// The value as (top 32 bits, low 128 bits): ring arithmetic and comparisons
    /// run on two machine integers instead of twenty bytes.
    fn limbs(self) -> (u32, u128) {
        let mut hi = [0u8; 4];
        let mut lo = [0u8; 16];
        hi.copy_from_slice(&self.0[..4]);
        lo.copy_from_slice(&self.0[4..]);
        (u32::from_be_bytes(hi), u128::from_be_bytes(lo))
    }

    fn from_limbs(hi: u32, lo: u128) -> Id {
        let mut b = [0u8; ID_BYTES];
        b[..4].copy_from_slice(&hi.to_be_bytes());
        b[4..].copy_from_slice(&lo.to_be_bytes());
        Id(b)
    }

    /// `self + 2^i` modulo 2^160: the start of finger `i`.
    pub fn add_pow2(self, i: u32) -> Id {
        self.wrapping_add(Id::pow2(i))
    }

    /// Clockwise distance from `self` to `to`: `(to - self) mod 2^160`.
    pub fn distance_to(self, to: Id) -> Id {
        to.wrapping_sub(self)
    }

    /// `self ∈ (a, b)` on the ring. When `a == b` the interval is the whole ring but `a`.
    pub fn in_open(self, a: Id, b: Id) -> bool {
        if a == b {
            return self != a;
        }
        let d = a.distance_to(self);
        d != Id::ZERO && d.limbs() < a.distance_to(b).limbs()
    }

    /// `self ∈ (a, b]` on the ring. When `a == b` the interval is the whole ring.
    pub fn in_half_open(self, a: Id, b: Id) -> bool {
        if a == b {
            return true;
        }
        let d = a.distance_to(self);
        d != Id::ZERO && d.limbs() <= a.distance_to(b).limbs()
    }

    /// The top 64 bits, for cheap sampling and plotting.
    pub fn high_u64(self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }

    /// Number of leading zero bits (160 for zero).
    pub fn leading_zeros(self) -> u32 {
        let mut n = 0;
        for byte in self.0 {
            if byte == 0 {
                n += 8;
            } else {
                return n + byte.leading_zeros();
            }
        }
        n
    }

    /// ⌊log2(self)⌋, or `None` for zero.
    pub fn log2(self) -> Option<u32> {
        (self != Id::ZERO).then(|| ID_BITS - 1 - self.leading_zeros())
    }
}

/// Numeric order, which is the order of the big-endian bytes.
impl Ord for Id {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.limbs().cmp(&other.limbs())
    }
}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Eight digits are plenty to tell ids apart in logs.
        write!(f, "Id({:02x}{:02x}{:02x}{:02x}…)", self.0[0], self.0[1], self.0[2], self.0[3])
    }
}

impl FromStr for Id {
    type Err = ParseIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseIdError(s.chars().take(64).collect());
        if s.len() != 2 * ID_BYTES || !s.is_ascii() {
            return Err(err());
        }
        let mut out = [0u8; ID_BYTES];
        for (i, chunk) in s.as_bytes().chunks_exact(2).enumerate() {
            let pair = std::str::from_utf8(chunk).map_err(|_| err())?;
            out[i] = u8::from_str_radix(pair, 16).map_err(|_| err())?;
        }
        Ok(Id(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_id() -> impl Strategy<Value = Id> {
        prop_oneof![
            any::<[u8; ID_BYTES]>().prop_map(Id),
            // Small and extreme values, where wrap-around bugs hide.
            (0u8..4).prop_map(|v| Id::ZERO.wrapping_add(Id::from_bytes({
                let mut b = [0; ID_BYTES];
                b[ID_BYTES - 1] = v;
                b
            }))),
            (0u8..4).prop_map(|v| Id::MAX.wrapping_sub(Id::from_bytes({
                let mut b = [0; ID_BYTES];
                b[ID_BYTES - 1] = v;
                b
            }))),
        ]
    }

    /// Schoolbook byte-at-a-time addition: the reference the limb arithmetic must match.
    fn bytewise_add(a: Id, b: Id) -> Id {
        let mut out = [0u8; ID_BYTES];
        let mut carry = 0u16;
        for i in (0..ID_BYTES).rev() {
            let s = u16::from(a.0[i]) + u16::from(b.0[i]) + carry;
            out[i] = s as u8;
            carry = s >> 8;
        }
        Id(out)
    }

    /// `a - b` as `a + (!b + 1)`, byte at a time.
    fn bytewise_sub(a: Id, b: Id) -> Id {
        let mut neg = b.0.map(|x| !x);
        for byte in neg.iter_mut().rev() {
            let (v, overflow) = byte.overflowing_add(1);
            *byte = v;
            if !overflow {
                break;
            }
        }
        bytewise_add(a, Id(neg))
    }

    #[test]
    fn sha1_matches_known_vector() {
        // FIPS 180 test vector for "abc".
        assert_eq!(Id::hash("abc").to_string(), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }

    #[test]
    fn pow2_and_wrap() {
        assert_eq!(Id::pow2(0).to_string(), format!("{}1", "0".repeat(39)));
        assert_eq!(Id::pow2(159).to_string(), format!("8{}", "0".repeat(39)));
        assert_eq!(Id::MAX.add_pow2(0), Id::ZERO);
        assert_eq!(Id::pow2(159).add_pow2(159), Id::ZERO);
        assert_eq!(Id::ZERO.wrapping_sub(Id::pow2(0)), Id::MAX);
        assert_eq!(Id::pow2(10).log2(), Some(10));
        assert_eq!(Id::ZERO.log2(), None);
    }

    #[test]
    fn parse_rejects_bad_strings() {
        assert!("".parse::<Id>().is_err());
        assert!("zz".repeat(20).parse::<Id>().is_err());
        assert!("00".repeat(21).parse::<Id>().is_err());
        assert!("é".repeat(20).parse::<Id>().is_err());
    }

    proptest! {
        #[test]
        fn hex_round_trips(id in arb_id()) {
            prop_assert_eq!(id.to_string().parse::<Id>().unwrap(), id);
        }

        #[test]
        fn arithmetic_and_order_match_bytewise_reference(a in arb_id(), b in arb_id()) {
            prop_assert_eq!(a.wrapping_add(b), bytewise_add(a, b));
            prop_assert_eq!(a.wrapping_sub(b), bytewise_sub(a, b));
            prop_assert_eq!(a.cmp(&b), a.as_bytes().cmp(b.as_bytes()));
        }

        #[test]
        fn add_sub_inverse(a in arb_id(), b in arb_id()) {
            prop_assert_eq!(a.wrapping_add(b).wrapping_sub(b), a);
            prop_assert_eq!(a.wrapping_add(b), b.wrapping_add(a));
        }

        #[test]
        fn distances_around_the_ring_sum_to_zero(a in arb_id(), b in arb_id()) {
            // d(a,b) + d(b,a) = 2^160 ≡ 0.
            prop_assert_eq!(a.distance_to(b).wrapping_add(b.distance_to(a)), Id::ZERO);
        }

        #[test]
        fn half_open_intervals_partition_the_ring(a in arb_id(), b in arb_id(), x in arb_id()) {
            prop_assume!(a != b);
            prop_assert!(x.in_half_open(a, b) ^ x.in_half_open(b, a));
        }

        #[test]
        fn open_interval_is_half_open_minus_end(a in arb_id(), b in arb_id(), x in arb_id()) {
            prop_assert_eq!(x.in_open(a, b), x.in_half_open(a, b) && x != b);
            prop_assert!(!a.in_open(a, b));
            prop_assert!(!b.in_open(a, b));
            prop_assert!(b.in_half_open(a, b));
        }

        #[test]
        fn open_intervals_with_endpoints_cover_the_ring(a in arb_id(), b in arb_id(), x in arb_id()) {
            prop_assume!(a != b);
            let hits = [x.in_open(a, b), x.in_open(b, a), x == a, x == b];
            prop_assert_eq!(hits.iter().filter(|h| **h).count(), 1);
        }

        #[test]
        fn add_pow2_moves_forward_by_exactly_2_pow_i(a in arb_id(), i in 0u32..ID_BITS) {
            let f = a.add_pow2(i);
            prop_assert_eq!(a.distance_to(f), Id::pow2(i));
            prop_assert!(f.in_half_open(a, f));
        }
    }
}
