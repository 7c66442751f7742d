//! Ed25519 keys and signatures, and the one textual form of a public key:
//! `ed25519:` followed by the 32 key bytes as 64 lowercase hex digits.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

/// The prefix of a public key's text form.
pub const KEY_PREFIX: &str = "ed25519:";

/// Why a key's text form was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text does not start with `ed25519:`.
    #[error("a key starts with `{KEY_PREFIX}`")]
    Prefix,
    /// Not exactly 64 hex digits after the prefix.
    #[error("a key has 64 hex digits after `{KEY_PREFIX}`, this one has {0} characters")]
    Length(usize),
    /// A character that is not a lowercase hex digit.
    #[error("character {at} of the key is not a lowercase hex digit")]
    NotHex {
        /// Its byte offset in the text.
        at: usize,
    },
    /// The bytes are not a valid Ed25519 public key (not a curve point).
    #[error("the bytes are not an Ed25519 public key")]
    NotAKey,
}

/// Why a signature does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The key bytes are no curve point.
    #[error("the signer's key is not an Ed25519 public key")]
    BadKey,
    /// The signature does not match the key and the bytes signed.
    #[error("bad signature")]
    Mismatch,
}

/// An Ed25519 public key (who signed). `Display`/`FromStr` use the text form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PublicKey(pub [u8; 32]);

/// An Ed25519 signature (64 bytes, kept as two halves so serde derives it).
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature(pub [[u8; 32]; 2]);

/// An Ed25519 secret key (its 32-byte seed). Pure: the caller reads or makes
/// the seed (key files live in the tool, randomness comes from outside).
#[derive(Clone)]
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// The key of a 32-byte seed.
    pub fn from_seed(seed: [u8; 32]) -> Self {
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// The 32-byte seed (what a key file holds).
    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// Its public key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// Signs `msg`.
    pub fn sign(&self, msg: &[u8]) -> Signature {
        Signature::from_bytes(self.0.sign(msg).to_bytes())
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.public())
    }
}

impl Signature {
    /// From the 64 signature bytes.
    pub fn from_bytes(b: [u8; 64]) -> Self {
        let (mut lo, mut hi) = ([0u8; 32], [0u8; 32]);
        lo.copy_from_slice(&b[..32]);
        hi.copy_from_slice(&b[32..]);
        Signature([lo, hi])
    }

    /// The 64 signature bytes.
    pub fn to_bytes(self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[..32].copy_from_slice(&self.0[0]);
        b[32..].copy_from_slice(&self.0[1]);
        b
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({:02x}{:02x}..)", self.0[0][0], self.0[0][1])
    }
}

impl PublicKey {
    /// Whether `sig` is this key's signature over `msg` (strict verification:
    /// no malleable or small-order forms).
    pub fn verify(&self, msg: &[u8], sig: &Signature) -> Result<(), SignatureError> {
        let key = VerifyingKey::from_bytes(&self.0).map_err(|_| SignatureError::BadKey)?;
        let sig = ed25519_dalek::Signature::from_bytes(&sig.to_bytes());
        key.verify_strict(msg, &sig).map_err(|_| SignatureError::Mismatch)
    }

    /// Parses the text form strictly: the prefix, then exactly 64 lowercase hex
    /// digits naming a curve point; no spaces, no other case.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let hex = text.strip_prefix(KEY_PREFIX).ok_or(KeyError::Prefix)?;
        if hex.len() != 64 {
            return Err(KeyError::Length(hex.len()));
        }
        let mut bytes = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |j: usize| {
                let c = pair[j];
                let at = KEY_PREFIX.len() + 2 * i + j;
                match c {
                    b'0'..=b'9' => Ok(c - b'0'),
                    b'a'..=b'f' => Ok(c - b'a' + 10),
                    _ => Err(KeyError::NotHex { at }),
                }
            };
            bytes[i] = (digit(0)? << 4) | digit(1)?;
        }
        VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::NotAKey)?;
        Ok(PublicKey(bytes))
    }
}

impl FromStr for PublicKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        PublicKey::parse(s)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(KEY_PREFIX)?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}
