//! Encrypted rank-to-rank links: this rank's Noise key, the keys its peers
//! registered, and the policy of which links are encrypted.
//!
//! Each rank makes a fresh static key at start and registers its public half
//! with its address ([`LocalRequest::RegisterKeyed`]); resolving a peer
//! returns each address with its key. A rank dialing an address expects the
//! key registered there to answer the handshake; a rank accepting a
//! connection takes its hello only once the key that opened it is one the
//! named rank registered (looked up when not known yet). So neither an
//! on-path host nor a process that reaches a rank's port can read the job's
//! messages or speak as one of its ranks.
//!
//! An accepted connection says which it is by its first two bytes: the
//! length of Noise XX's first message, or the length prefix of a plain hello
//! (a small frame: two zero bytes). A plain one from another host is refused
//! when the policy wants encryption there.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use bytes::BytesMut;
use p2pmp_core::id::Id;
use p2pmp_core::local::{Endpoint, LocalRequest};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::secure::{PublicKey, SecureChannel, SecureRng, StaticKey};

use crate::env::Encrypt;

/// Most keys remembered per peer rank (a rank keeps one key, so more than one
/// comes only from stale or forged registrations).
const KEYS_PER_RANK: usize = 4;

/// What a rank knows for encrypting its links.
#[derive(Debug)]
pub(super) struct Keys {
    policy: Encrypt,
    host: IpAddr,
    key: StaticKey,
    rng: SecureRng,
    /// Keys each peer rank registered, as resolved so far.
    ranks: Vec<Vec<PublicKey>>,
    /// The key registered with each peer address resolved so far.
    at: BTreeMap<SocketAddr, PublicKey>,
}

impl Keys {
    /// A fresh key (from the OS's randomness) for a rank of `size` ranks
    /// listening on `host`.
    pub(super) fn new(policy: Encrypt, host: IpAddr, size: u32) -> Self {
        let mut rng = SecureRng::from_seed(p2pmp_adapters::os_seed());
        let key = StaticKey::generate(&mut rng);
        Keys { policy, host, key, rng, ranks: vec![Vec::new(); size as usize], at: BTreeMap::new() }
    }

    /// The registration of `key` at `addr`, with our public key.
    pub(super) fn register(&self, key: Id, addr: NodeAddr) -> LocalRequest {
        LocalRequest::RegisterKeyed { key, addr, public: self.key.public() }
    }

    /// Whether a TCP link with `peer` is encrypted.
    pub(super) fn wanted(&self, peer: IpAddr) -> bool {
        self.policy.wanted(self.host, peer)
    }

    /// Remembers what resolving `rank` returned.
    pub(super) fn learn(&mut self, rank: u32, endpoints: &[Endpoint]) {
        for e in endpoints {
            let Some(k) = e.key else { continue };
            self.at.insert(e.addr.0, k);
            if let Some(known) = self.ranks.get_mut(rank as usize)
                && !known.contains(&k)
            {
                if known.len() == KEYS_PER_RANK {
                    known.remove(0);
                }
                known.push(k);
            }
        }
    }

    /// The key registered with address `addr`, if resolved.
    pub(super) fn at(&self, addr: SocketAddr) -> Option<PublicKey> {
        self.at.get(&addr).copied()
    }

    /// Whether `key` is one `rank` registered (as resolved so far).
    pub(super) fn vouches(&self, rank: u32, key: PublicKey) -> bool {
        self.ranks.get(rank as usize).is_some_and(|k| k.contains(&key))
    }

    /// A dialing side's channel; its first handshake message goes to `out`.
    pub(super) fn initiator(&mut self, out: &mut BytesMut) -> SecureChannel {
        let seed = self.rng.seed();
        SecureChannel::initiator(&self.key, seed, out)
    }

    /// An accepting side's channel.
    pub(super) fn responder(&mut self) -> SecureChannel {
        let seed = self.rng.seed();
        SecureChannel::responder(&self.key, seed)
    }
}

/// Whether the first two bytes of an accepted connection start a Noise
/// handshake (the length of XX's first message, 32) rather than a plain hello
/// (a frame shorter than 64 KiB: two zero bytes).
pub(super) fn starts_handshake(first: &[u8]) -> bool {
    first.len() >= 2 && first[..2] == [0, 32]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(addr: &str, key: Option<u8>) -> Endpoint {
        Endpoint { addr: NodeAddr(addr.parse().unwrap()), key: key.map(|b| PublicKey([b; 32])) }
    }

    #[test]
    fn a_rank_vouches_only_for_keys_resolved_for_it() {
        let mut k = Keys::new(Encrypt::Auto, "198.18.0.1".parse().unwrap(), 3);
        assert!(!k.vouches(1, PublicKey([1; 32])));
        k.learn(1, &[endpoint("198.18.0.2:5000", Some(1)), endpoint("198.18.0.3:5000", None)]);
        assert!(k.vouches(1, PublicKey([1; 32])));
        assert!(!k.vouches(2, PublicKey([1; 32])));
        assert!(!k.vouches(7, PublicKey([1; 32])));
        assert_eq!(k.at("198.18.0.2:5000".parse().unwrap()), Some(PublicKey([1; 32])));
        assert_eq!(k.at("198.18.0.3:5000".parse().unwrap()), None);
        for b in 2..10 {
            k.learn(1, &[endpoint("198.18.0.2:5001", Some(b))]);
        }
        assert_eq!(k.ranks[1].len(), KEYS_PER_RANK);
        assert!(k.vouches(1, PublicKey([9; 32])));
        assert!(!k.vouches(1, PublicKey([1; 32])));
    }

    #[test]
    fn a_noise_first_message_is_told_from_a_plain_hello() {
        let mut k = Keys::new(Encrypt::Always, "127.0.0.1".parse().unwrap(), 2);
        let mut first = BytesMut::new();
        let _ = k.initiator(&mut first);
        assert!(starts_handshake(&first));
        assert!(!starts_handshake(&[0, 0, 0, 40]));
        assert!(!starts_handshake(&[0]));
    }
}
