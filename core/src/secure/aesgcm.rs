//! Noise's `AESGCM` cipher (AES-256-GCM, the nonce 32 zero bits then the
//! counter big-endian) done by ring: the handshake's through snow's
//! [`snow::types::Cipher`], the records' in place ([`RecordCipher`]).
//!
//! Why AES-GCM and not ChaChaPoly: where the CPU has AES and carry-less
//! multiply instructions (x86-64 since 2010, most 64-bit ARM), ring seals
//! 1 MiB records 3.7x faster (10.4 GB/s against 2.8 on the bench machine), and
//! a link between hosts is then bounded by the network, not the cipher. Where
//! the CPU lacks the vector AES instructions (VAES) it is much slower: 1.8 GB/s
//! sealing and 1.6 opening on a 2-core test VM without them (`cargo bench -p
//! p2pmp-core --bench secure`), under what TCP between two of its namespaces
//! carries; 5.1 and 4.6 GB/s on one with them (December 2026), where a
//! raw window of 1 MiB messages over loopback TCP, sealed and opened by ring
//! in records as these, moved 1,940-2,060 MB/s against 2,300-3,300 unsealed
//! (the MPI bench's `tcp_window.rs`).

use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, Tag, UnboundKey};

/// Bytes of a key.
pub(super) const KEY_LEN: usize = 32;
/// Bytes of a tag.
pub(super) const TAG_LEN: usize = 16;

fn key(bytes: &[u8; KEY_LEN]) -> LessSafeKey {
    // AES-256 takes exactly a 32-byte key.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).expect("a 32-byte key"))
}

/// Nonce `n` as Noise's AESGCM spells it.
fn nonce(n: u64) -> Nonce {
    let mut b = [0u8; 12];
    b[4..].copy_from_slice(&n.to_be_bytes());
    Nonce::assume_unique_for_key(b)
}

/// The handshake's cipher, for snow (which keeps the nonces).
pub(super) struct NoiseAesGcm(LessSafeKey);

impl Default for NoiseAesGcm {
    fn default() -> Self {
        NoiseAesGcm(key(&[0; KEY_LEN]))
    }
}

impl snow::types::Cipher for NoiseAesGcm {
    fn name(&self) -> &'static str {
        "AESGCM"
    }

    fn set(&mut self, k: &[u8; KEY_LEN]) {
        self.0 = key(k);
    }

    fn encrypt(&self, n: u64, authtext: &[u8], plaintext: &[u8], out: &mut [u8]) -> usize {
        // snow hands an `out` with room for the plaintext and its tag.
        let len = plaintext.len();
        out[..len].copy_from_slice(plaintext);
        let tag = self
            .0
            .seal_in_place_separate_tag(nonce(n), Aad::from(authtext), &mut out[..len])
            .expect("a handshake-sized plaintext");
        out[len..len + TAG_LEN].copy_from_slice(tag.as_ref());
        len + TAG_LEN
    }

    fn decrypt(&self, n: u64, authtext: &[u8], ciphertext: &[u8], out: &mut [u8]) -> Result<usize, snow::Error> {
        let len = ciphertext.len().checked_sub(TAG_LEN).ok_or(snow::Error::Decrypt)?;
        let (body, tag) = ciphertext.split_at(len);
        let tag = Tag::try_from(tag).map_err(|_| snow::Error::Decrypt)?;
        let out = out.get_mut(..len).ok_or(snow::Error::Decrypt)?;
        out.copy_from_slice(body);
        self.0
            .open_in_place_separate_tag(nonce(n), Aad::from(authtext), tag, out, 0..)
            .map_err(|_| snow::Error::Decrypt)?;
        Ok(len)
    }
}

/// One direction of an open channel: Noise's `CipherState` (a key and a
/// counter nonce), sealing and opening records in place.
pub(super) struct RecordCipher {
    aead: LessSafeKey,
    /// The next record's nonce.
    n: u64,
}

impl RecordCipher {
    pub(super) fn new(k: &[u8; KEY_LEN]) -> Self {
        RecordCipher { aead: key(k), n: 0 }
    }

    /// The next nonce, or `None` once the 2^64 - 1 usable ones are spent
    /// (Noise reserves the last).
    fn next_nonce(&mut self) -> Option<Nonce> {
        if self.n == u64::MAX {
            return None;
        }
        self.n += 1;
        Some(nonce(self.n - 1))
    }

    /// Encrypts `buf` in place: its tag.
    pub(super) fn seal(&mut self, buf: &mut [u8]) -> Tag {
        // Sealing 2^64 records takes centuries, and the AEAD refuses only
        // plaintexts over 64 GiB (records hold at most 64 KiB).
        let n = self.next_nonce().expect("record nonces left");
        self.aead.seal_in_place_separate_tag(n, Aad::empty(), buf).expect("a record-sized plaintext")
    }

    /// Authenticates then decrypts `buf` in place, given its `tag`: false
    /// when it is not what was sealed (or the nonces are spent).
    pub(super) fn open(&mut self, buf: &mut [u8], tag: &[u8]) -> bool {
        let (Some(n), Ok(tag)) = (self.next_nonce(), Tag::try_from(tag)) else { return false };
        self.aead.open_in_place_separate_tag(n, Aad::empty(), tag, buf, 0..).is_ok()
    }
}
