//! One secure connection as a byte-in, byte-out state machine: the Noise XX
//! handshake, then length-prefixed encrypted records.
//!
//! ```text
//! stream = record*
//! record = len:u16-be  noise-message[len]     (len <= 65535, tag included)
//! ```
//!
//! The initiator sends the first handshake message when it is built; each side
//! answers the other's until both are done (three messages). Bytes sealed before
//! the channel is open ride as the payload of the side's next handshake message
//! (the responder's in the second, encrypted to the initiator and authenticated
//! by the responder's static key; the initiator's in the third), so a hello costs
//! no extra record and each side reads the other's before answering; whatever
//! does not fit is sealed into records as soon as the channel opens. The first
//! message carries nothing: it is sent in the clear.
//!
//! Once open, records are Noise transport messages exactly as snow's
//! `TransportState` makes them (AESGCM, no associated data, the nonce a
//! counter from 0), but sealed and opened in place by ring's AES-256-GCM
//! with the transport keys of the handshake's split: a record is sealed where
//! it is written in the outgoing buffer and opened where it was received, so
//! the plaintext is copied once each way (into the outgoing buffer; out to the
//! caller's) and never zero-filled first. Each sealing call ends its last
//! record, so a sender that wants the receiver to start decrypting early seals
//! a little at a time (as the MPI transport does).

use bytes::{Buf, BufMut, BytesMut};
use thiserror::Error;

use super::aesgcm::RecordCipher;
use super::{NOISE_PARAMS, PublicKey, StaticKey, resolver};

/// Largest Noise message, and so the largest record body.
pub const MAX_RECORD: usize = 65535;
/// Bytes of an authentication tag.
const TAG: usize = 16;
/// Largest plaintext one record carries.
pub const MAX_PLAIN_RECORD: usize = MAX_RECORD - TAG;
/// Bytes a record adds to its plaintext: the length prefix and the tag.
pub const RECORD_OVERHEAD: usize = 2 + TAG;
/// Room [`SecureChannel::read_buffer`] offers: two whole records.
const READ_ROOM: usize = 2 * (2 + MAX_RECORD);
/// Most early bytes one handshake message carries (XX adds at most 96 bytes).
const MAX_EARLY: usize = MAX_RECORD - 128;
/// The length of XX's first message: an ephemeral public key, no payload.
const FIRST_MESSAGE: usize = 32;

/// Bytes a peer sent that are not a valid handshake or record. The peer's fault
/// (or an attacker's): the caller drops the connection with this as the reason.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SecureError {
    /// A handshake message did not decode or authenticate.
    #[error("noise handshake failed: {0}")]
    Handshake(String),
    /// A record did not authenticate (tampered, replayed, reordered or not Noise).
    #[error("record does not authenticate")]
    BadRecord,
    /// The channel failed before; nothing more goes through it.
    #[error("secure channel already failed")]
    Broken,
}

enum State {
    Handshake(Box<snow::HandshakeState>),
    Open { tx: Box<RecordCipher>, rx: Box<RecordCipher>, remote: PublicKey },
    Broken,
}

/// One end of an authenticated, encrypted stream. See the module docs.
pub struct SecureChannel {
    state: State,
    /// Received bytes not yet making a whole record.
    rx: BytesMut,
    /// Sealed before the channel opened: sent with the handshake.
    early: BytesMut,
    /// A responder that has not read the first message yet.
    awaiting_first: bool,
}

impl std::fmt::Debug for SecureChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Handshake(_) => "handshake",
            State::Open { .. } => "open",
            State::Broken => "broken",
        };
        f.debug_struct("SecureChannel")
            .field("state", &state)
            .field("rx", &self.rx.len())
            .field("early", &self.early.len())
            .finish()
    }
}

fn builder<'a>(key: &'a StaticKey, seed: [u8; 32]) -> snow::Builder<'a> {
    // NOISE_PARAMS is a constant that parses, and a 32-byte key is always accepted.
    let params = NOISE_PARAMS.parse().expect("valid noise params");
    snow::Builder::with_resolver(params, resolver(seed))
        .local_private_key(key.private_bytes())
        .expect("a 32-byte x25519 key")
}

impl SecureChannel {
    /// The dialing side: its first handshake message is appended to `out`.
    pub fn initiator(key: &StaticKey, seed: [u8; 32], out: &mut BytesMut) -> Self {
        // The resolver supplies every primitive NOISE_PARAMS names and an RNG.
        let hs = builder(key, seed).build_initiator().expect("initiator builds");
        let mut ch = SecureChannel {
            state: State::Handshake(Box::new(hs)),
            rx: BytesMut::new(),
            early: BytesMut::new(),
            awaiting_first: false,
        };
        // An empty first message always fits a record.
        ch.write_handshake(out).expect("first handshake message");
        ch
    }

    /// The accepting side: it waits for the initiator's first message.
    pub fn responder(key: &StaticKey, seed: [u8; 32]) -> Self {
        // As in `initiator`.
        let hs = builder(key, seed).build_responder().expect("responder builds");
        SecureChannel {
            state: State::Handshake(Box::new(hs)),
            rx: BytesMut::new(),
            early: BytesMut::new(),
            awaiting_first: true,
        }
    }

    /// The handshake is over: [`SecureChannel::seal`] works and the peer is known.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// The peer's authenticated static key, once open.
    pub fn remote_key(&self) -> Option<PublicKey> {
        match &self.state {
            State::Open { remote, .. } => Some(*remote),
            _ => None,
        }
    }

    /// Bytes received and not yet part of a whole record.
    pub fn buffered(&self) -> usize {
        self.rx.len()
    }

    /// Bytes sealed before the channel opened and not yet sent.
    pub fn early(&self) -> usize {
        self.early.len()
    }

    /// Takes bytes received from the peer. Handshake answers are appended to
    /// `out` (send them); decrypted application bytes to `plain`. Returns whether
    /// the channel opened during this call. An error is final.
    pub fn on_bytes(&mut self, data: &[u8], plain: &mut BytesMut, out: &mut BytesMut) -> Result<bool, SecureError> {
        if matches!(self.state, State::Broken) {
            return Err(SecureError::Broken);
        }
        self.rx.extend_from_slice(data);
        self.on_read(plain, out)
    }

    /// The receive buffer, for drivers that read straight into it (saving
    /// [`SecureChannel::on_bytes`]'s copy), with room for two whole records;
    /// then [`SecureChannel::on_read`]. Bytes already in it wait for the rest of
    /// their record: append only.
    pub fn read_buffer(&mut self) -> &mut BytesMut {
        self.rx.reserve(READ_ROOM);
        &mut self.rx
    }

    /// [`SecureChannel::on_bytes`] for bytes already appended to
    /// [`SecureChannel::read_buffer`].
    pub fn on_read(&mut self, plain: &mut BytesMut, out: &mut BytesMut) -> Result<bool, SecureError> {
        if matches!(self.state, State::Broken) {
            return Err(SecureError::Broken);
        }
        if self.awaiting_first
            && self.rx.len() >= 2
            && usize::from(u16::from_be_bytes([self.rx[0], self.rx[1]])) != FIRST_MESSAGE
        {
            // Refused at its first two bytes, not after waiting for up to 64 KiB.
            self.state = State::Broken;
            return Err(SecureError::Handshake("not a Noise XX first message".into()));
        }
        let mut opened = false;
        while let Some(len) = self.next_record_len() {
            let res = match self.state {
                State::Handshake(_) => self.read_handshake(len, plain, out).map(|o| opened |= o),
                State::Open { .. } => self.open_record(len, plain),
                State::Broken => Err(SecureError::Broken),
            };
            if let Err(e) = res {
                self.state = State::Broken;
                return Err(e);
            }
        }
        Ok(opened)
    }

    /// Encrypts `plain` as records appended to `out` (in as many records as it
    /// needs). During the handshake the bytes wait and go with it (see the
    /// module docs); on a broken channel it is [`SecureError::Broken`].
    pub fn seal(&mut self, plain: &[u8], out: &mut BytesMut) -> Result<(), SecureError> {
        self.seal_vectored(&[plain], out)
    }

    /// Seals one encoded frame, its header then its payload, appending to
    /// `out`: both go into the same records, so a small frame costs one.
    pub fn seal_frame(&mut self, head: &[u8], payload: &[u8], out: &mut BytesMut) -> Result<(), SecureError> {
        self.seal_vectored(&[head, payload], out)
    }

    /// Seals the bytes of `parts`, one after the other, as
    /// [`SecureChannel::seal`] seals them together: in full records of
    /// [`MAX_PLAIN_RECORD`] bytes, the last one shorter (none for no bytes).
    /// Each is copied once, into `out`, and encrypted there.
    pub fn seal_vectored(&mut self, parts: &[&[u8]], out: &mut BytesMut) -> Result<(), SecureError> {
        let tx = match &mut self.state {
            State::Open { tx, .. } => tx,
            State::Handshake(_) => {
                parts.iter().for_each(|p| self.early.extend_from_slice(p));
                return Ok(());
            }
            State::Broken => return Err(SecureError::Broken),
        };
        let mut left: usize = parts.iter().map(|p| p.len()).sum();
        out.reserve(Self::sealed_len(left));
        let mut parts = parts.iter().copied();
        let mut part: &[u8] = &[];
        while left > 0 {
            let len = left.min(MAX_PLAIN_RECORD);
            // len <= MAX_PLAIN_RECORD, so the body fits the u16 prefix.
            out.put_u16((len + TAG) as u16);
            let at = out.len();
            while out.len() < at + len {
                if part.is_empty() {
                    // The parts hold `left` bytes, and `len <= left`.
                    part = parts.next().expect("parts hold the bytes counted");
                    continue;
                }
                let take = part.len().min(at + len - out.len());
                out.extend_from_slice(&part[..take]);
                part = &part[take..];
            }
            let tag = tx.seal(&mut out[at..]);
            out.extend_from_slice(tag.as_ref());
            left -= len;
        }
        Ok(())
    }

    /// Bytes [`SecureChannel::seal`] appends for `plain_len` bytes of plaintext
    /// (at most; none for none).
    pub fn sealed_len(plain_len: usize) -> usize {
        plain_len + plain_len.div_ceil(MAX_PLAIN_RECORD).max(1) * RECORD_OVERHEAD
    }

    /// The length of the next record if it has arrived whole.
    fn next_record_len(&self) -> Option<usize> {
        if self.rx.len() < 2 {
            return None;
        }
        let len = usize::from(u16::from_be_bytes([self.rx[0], self.rx[1]]));
        (self.rx.len() >= 2 + len).then_some(len)
    }

    fn write_handshake(&mut self, out: &mut BytesMut) -> Result<(), SecureError> {
        let State::Handshake(hs) = &mut self.state else { return Ok(()) };
        let early = self.early.split_to(self.early.len().min(MAX_EARLY));
        let mut msg = vec![0u8; MAX_RECORD];
        let n = hs.write_message(&early, &mut msg).map_err(|e| SecureError::Handshake(e.to_string()))?;
        // n <= MAX_RECORD (the buffer's size).
        out.put_u16(n as u16);
        out.extend_from_slice(&msg[..n]);
        self.finish_handshake()?;
        self.seal_early(out)
    }

    /// Once open: seals what waited for the handshake and did not ride with it.
    fn seal_early(&mut self, out: &mut BytesMut) -> Result<(), SecureError> {
        if self.is_open() && !self.early.is_empty() {
            let early = self.early.split();
            self.seal(&early, out)?;
        }
        Ok(())
    }

    /// Reads one handshake message of `len` bytes (its payload to `plain`) and
    /// answers it if it is our turn.
    fn read_handshake(&mut self, len: usize, plain: &mut BytesMut, out: &mut BytesMut) -> Result<bool, SecureError> {
        let State::Handshake(hs) = &mut self.state else { return Ok(false) };
        let msg = &self.rx[2..2 + len];
        self.awaiting_first = false;
        let at = plain.len();
        plain.resize(at + len, 0);
        let res = hs.read_message(msg, &mut plain[at..]);
        self.rx.advance(2 + len);
        match res {
            // Bytes before the peer's static key is known would be unauthenticated
            // (the first message is in the clear): refused.
            Ok(n) if n > 0 && hs.get_remote_static().is_none() => {
                plain.truncate(at);
                return Err(SecureError::Handshake("payload before the peer is authenticated".into()));
            }
            Ok(n) => plain.truncate(at + n),
            Err(e) => {
                plain.truncate(at);
                return Err(SecureError::Handshake(e.to_string()));
            }
        }
        let was_open = self.is_open();
        self.finish_handshake()?;
        self.seal_early(out)?;
        if let State::Handshake(hs) = &self.state
            && hs.is_my_turn()
        {
            self.write_handshake(out)?;
        }
        Ok(!was_open && self.is_open())
    }

    /// Switches to transport mode once the last handshake message went either way.
    fn finish_handshake(&mut self) -> Result<(), SecureError> {
        let State::Handshake(hs) = &self.state else { return Ok(()) };
        if !hs.is_handshake_finished() {
            return Ok(());
        }
        // Checked just above: the state is a handshake.
        let State::Handshake(mut hs) = std::mem::replace(&mut self.state, State::Broken) else { unreachable!() };
        let remote = hs
            .get_remote_static()
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .ok_or_else(|| SecureError::Handshake("no static key from the peer".into()))?;
        // Noise's Split: the first key seals what the initiator sends, the
        // second what the responder sends (snow's TransportState does the same).
        let (mut k1, mut k2) = hs.dangerously_get_raw_split();
        let (tx, rx) = if hs.is_initiator() { (&k1, &k2) } else { (&k2, &k1) };
        self.state = State::Open {
            tx: Box::new(RecordCipher::new(tx)),
            rx: Box::new(RecordCipher::new(rx)),
            remote: PublicKey(remote),
        };
        k1.fill(0);
        k2.fill(0);
        Ok(())
    }

    /// Decrypts one record of `len` bytes where it lies in the receive buffer,
    /// then appends its plaintext to `plain`.
    fn open_record(&mut self, len: usize, plain: &mut BytesMut) -> Result<(), SecureError> {
        let State::Open { rx, .. } = &mut self.state else { return Err(SecureError::Broken) };
        if len < TAG {
            return Err(SecureError::BadRecord);
        }
        let (body, tag) = self.rx[2..2 + len].split_at_mut(len - TAG);
        if !rx.open(body, tag) {
            return Err(SecureError::BadRecord);
        }
        plain.extend_from_slice(body);
        self.rx.advance(2 + len);
        Ok(())
    }
}
