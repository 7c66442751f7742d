//! Authenticated, encrypted byte streams: the Noise protocol
//! (`Noise_XX_25519_AESGCM_SHA256`, through the `snow` crate) for node-to-node
//! links (the adapters' `Driver`) and rank-to-rank links (the MPI transport).
//!
//! Pure compute, like the rest of core: no socket, clock or OS randomness. The
//! caller seeds a [`SecureRng`] once (from the OS, in the adapters or the MPI
//! library) and draws a fresh seed from it for every key and every handshake.
//!
//! - [`StaticKey`]: a node's or rank's long-term X25519 key pair; its
//!   [`PublicKey`] is what the handshake authenticates.
//! - [`SecureChannel`]: one connection's handshake and then its records, as a
//!   byte-in, byte-out state machine over any stream.
//!
//! Why Noise XX and not TLS: there is no CA in a peer-to-peer network, and XX
//! authenticates both sides' raw static keys in one and a half round trips (the
//! initiator's first data rides with the third handshake message); each record
//! costs 18 bytes (a 2-byte length and a 16-byte tag). The handshake's key
//! exchange and hash are small RustCrypto crates that `ed25519-dalek` (tool
//! signatures) shares; its cipher and the records' are ring's AES-256-GCM
//! (see `aesgcm` for why not ChaChaPoly).

mod aesgcm;
mod channel;

use std::fmt;

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use snow::resolvers::{BoxedCryptoResolver, CryptoResolver, DefaultResolver, FallbackResolver};

pub use channel::{MAX_PLAIN_RECORD, MAX_RECORD, RECORD_OVERHEAD, SecureChannel, SecureError};

/// The Noise protocol name every p2pmp link speaks.
pub const NOISE_PARAMS: &str = "Noise_XX_25519_AESGCM_SHA256";

/// Bytes of an X25519 key, public or private.
pub const KEY_LEN: usize = 32;

/// A static public key: what a peer proves it holds during the handshake.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl PublicKey {
    /// Parses 64 hex digits (the form [`fmt::Display`] prints).
    pub fn from_hex(s: &str) -> Option<Self> {
        key_from_hex(s).map(PublicKey)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&key_to_hex(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// 32 bytes from 64 hex digits (surrounding white space ignored).
pub fn key_from_hex(s: &str) -> Option<[u8; KEY_LEN]> {
    let s = s.trim();
    if s.len() != 2 * KEY_LEN || !s.is_ascii() {
        return None;
    }
    let mut k = [0u8; KEY_LEN];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(k)
}

/// 64 hex digits of 32 bytes.
pub fn key_to_hex(k: &[u8; KEY_LEN]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// A static X25519 key pair. Its `Debug` never shows the private half.
#[derive(Clone, PartialEq, Eq)]
pub struct StaticKey {
    private: [u8; KEY_LEN],
    public: PublicKey,
}

impl fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticKey").field("public", &self.public).finish_non_exhaustive()
    }
}

impl StaticKey {
    /// A new key pair whose private half is drawn from `rng`.
    pub fn generate(rng: &mut SecureRng) -> Self {
        let mut private = [0u8; KEY_LEN];
        rng.0.fill_bytes(&mut private);
        Self::from_private(private)
    }

    /// The key pair of a private key (any 32 bytes: X25519 clamps them).
    pub fn from_private(private: [u8; KEY_LEN]) -> Self {
        let mut dh = DefaultResolver
            .resolve_dh(&snow::params::DHChoice::Curve25519)
            // The curve25519 feature is always built in (Cargo.toml).
            .expect("snow is built with curve25519");
        dh.set(&private);
        let mut public = [0u8; KEY_LEN];
        public.copy_from_slice(dh.pubkey());
        StaticKey { private, public: PublicKey(public) }
    }

    /// The private half, for saving to a key file.
    pub fn private_bytes(&self) -> &[u8; KEY_LEN] {
        &self.private
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        self.public
    }
}

/// The cryptographic RNG of core's secure links: ChaCha20, seeded by the caller.
pub struct SecureRng(ChaCha20Rng);

impl fmt::Debug for SecureRng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecureRng")
    }
}

impl SecureRng {
    /// An RNG seeded with `seed` (32 bytes from the OS in production, fixed in tests).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        SecureRng(ChaCha20Rng::from_seed(seed))
    }

    /// A fresh 32-byte seed for one handshake's ephemeral key.
    pub fn seed(&mut self) -> [u8; 32] {
        let mut s = [0u8; 32];
        self.0.fill_bytes(&mut s);
        s
    }
}

/// Hands snow one handshake's randomness (its ephemeral key) and its cipher
/// (ring's AES-256-GCM), and defers the key exchange and hash to snow's
/// default resolver.
struct SeededResolver([u8; 32]);

struct SeededRandom(ChaCha20Rng);

impl snow::types::Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn snow::types::Random>> {
        Some(Box::new(SeededRandom(ChaCha20Rng::from_seed(self.0))))
    }
    fn resolve_dh(&self, _: &snow::params::DHChoice) -> Option<Box<dyn snow::types::Dh>> {
        None
    }
    fn resolve_hash(&self, _: &snow::params::HashChoice) -> Option<Box<dyn snow::types::Hash>> {
        None
    }
    fn resolve_cipher(&self, c: &snow::params::CipherChoice) -> Option<Box<dyn snow::types::Cipher>> {
        match c {
            snow::params::CipherChoice::AESGCM => Some(Box::<aesgcm::NoiseAesGcm>::default()),
            _ => None,
        }
    }
}

fn resolver(seed: [u8; 32]) -> BoxedCryptoResolver {
    Box::new(FallbackResolver::new(Box::new(SeededResolver(seed)), Box::new(DefaultResolver)))
}

#[cfg(test)]
mod tests;
