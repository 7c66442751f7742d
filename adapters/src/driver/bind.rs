//! Who is at the other end of a connection: the address a peer's hello claims is
//! bound to the static key its Noise handshake proved, so no peer can speak for
//! another's address, or for the node id that address maps to (`SHA-1(ip:port)`).
//!
//! - Dialing proves an address: the key that answers a connection we opened to
//!   `X` (whose hello says it listens at `X`) is pinned as `X`'s key.
//! - An inbound hello claiming `X` is refused if it comes from another host than
//!   `X`'s (the source IP differs; all loopback addresses count as one host), or
//!   if `X` is pinned to another key. An inbound claim of an address not pinned
//!   yet is accepted and verified: `X` is dialed (a probe), and if another key
//!   answers there, the claimant is dropped. A refusal on a pin probes too, so a
//!   node that really changed its key (a restart with a fresh key) is re-pinned
//!   and accepted on its next try.
//! - Every envelope on a connection must name the address and id its hello bound
//!   (checked by the driver before the machine sees it); one that names another
//!   sender is cut off.

use std::collections::BTreeMap;
use std::net::IpAddr;

use p2pmp_core::machine::NodeAddr;
use p2pmp_core::secure::PublicKey;

/// Most addresses whose keys a driver remembers; past it, new pins are not taken
/// (inbound claims still pass the host check).
const MAX_PINS: usize = 1 << 16;

/// The keys that answered when this node dialed each address.
#[derive(Debug, Default)]
pub(super) struct Pins(BTreeMap<NodeAddr, PublicKey>);

impl Pins {
    /// `key` answered at `addr`: it is `addr`'s key from now on.
    pub(super) fn learn(&mut self, addr: NodeAddr, key: PublicKey) {
        if self.0.len() < MAX_PINS || self.0.contains_key(&addr) {
            self.0.insert(addr, key);
        }
    }

    /// The key pinned for `addr`.
    pub(super) fn get(&self, addr: NodeAddr) -> Option<PublicKey> {
        self.0.get(&addr).copied()
    }
}

/// Whether a connection from `source` may come from the host listening at `listen`.
pub(super) fn same_host(source: IpAddr, listen: IpAddr) -> bool {
    let (s, l) = (source.to_canonical(), listen.to_canonical());
    s == l || (s.is_loopback() && l.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_by_ip_and_loopback_is_one_host() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_host(ip("198.18.0.2"), ip("198.18.0.2")));
        assert!(same_host(ip("::ffff:198.18.0.2"), ip("198.18.0.2")));
        assert!(same_host(ip("127.0.0.1"), ip("127.0.0.5")));
        assert!(!same_host(ip("198.18.0.3"), ip("198.18.0.2")));
        assert!(!same_host(ip("127.0.0.1"), ip("198.18.0.2")));
    }

    #[test]
    fn the_last_key_found_at_an_address_is_its_pin() {
        let a: NodeAddr = "198.18.0.2:7400".parse().unwrap();
        let mut pins = Pins::default();
        assert_eq!(pins.get(a), None);
        pins.learn(a, PublicKey([1; 32]));
        assert_eq!(pins.get(a), Some(PublicKey([1; 32])));
        pins.learn(a, PublicKey([2; 32]));
        assert_eq!(pins.get(a), Some(PublicKey([2; 32])));
    }
}
