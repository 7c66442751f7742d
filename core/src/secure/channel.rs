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

use bytes::{Buf, BufMut, BytesMut};
use thiserror::Error;

use super::{NOISE_PARAMS, PublicKey, StaticKey, resolver};

/// Largest Noise message, and so the largest record body.
pub const MAX_RECORD: usize = 65535;
/// Bytes of an authentication tag.
const TAG: usize = 16;
/// Largest plaintext one record carries.
pub const MAX_PLAIN_RECORD: usize = MAX_RECORD - TAG;
/// Bytes a record adds to its plaintext: the length prefix and the tag.
pub const RECORD_OVERHEAD: usize = 2 + TAG;
/// From this payload size on, [`SecureChannel::seal_frame`] seals a frame's
/// header and payload apart rather than copying them together.
pub const SEAL_APART_MIN: usize = 16 * 1024;
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
    Open { transport: Box<snow::TransportState>, remote: PublicKey },
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
        let transport = match &mut self.state {
            State::Open { transport, .. } => transport,
            State::Handshake(_) => {
                self.early.extend_from_slice(plain);
                return Ok(());
            }
            State::Broken => return Err(SecureError::Broken),
        };
        out.reserve(Self::sealed_len(plain.len()));
        for chunk in plain.chunks(MAX_PLAIN_RECORD) {
            let body = chunk.len() + TAG;
            // chunk.len() <= MAX_PLAIN_RECORD, so body <= u16::MAX.
            out.put_u16(body as u16);
            let at = out.len();
            out.resize(at + body, 0);
            // The buffer holds exactly the message, which is below MAXMSGLEN; the
            // nonce cannot run out before 2^64 records.
            transport.write_message(chunk, &mut out[at..]).expect("seal a record");
        }
        Ok(())
    }

    /// Seals one encoded frame, its header then its payload, appending to
    /// `out`: a small payload is copied beside the header into one record (one
    /// tag, one cipher call), a large one ([`SEAL_APART_MIN`] bytes or more)
    /// is sealed apart, saving the copy.
    pub fn seal_frame(&mut self, head: &[u8], payload: &[u8], out: &mut BytesMut) -> Result<(), SecureError> {
        out.reserve(Self::sealed_len(head.len() + payload.len()) + RECORD_OVERHEAD);
        if payload.len() >= SEAL_APART_MIN {
            self.seal(head, out)?;
            return self.seal(payload, out);
        }
        let mut frame = BytesMut::with_capacity(head.len() + payload.len());
        frame.extend_from_slice(head);
        frame.extend_from_slice(payload);
        self.seal(&frame, out)
    }

    /// Bytes [`SecureChannel::seal`] appends for `plain_len` bytes of plaintext.
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
        let State::Handshake(hs) = std::mem::replace(&mut self.state, State::Broken) else { unreachable!() };
        let remote = hs
            .get_remote_static()
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .ok_or_else(|| SecureError::Handshake("no static key from the peer".into()))?;
        let transport = hs.into_transport_mode().map_err(|e| SecureError::Handshake(e.to_string()))?;
        self.state = State::Open { transport: Box::new(transport), remote: PublicKey(remote) };
        Ok(())
    }

    /// Decrypts one record of `len` bytes into `plain`.
    fn open_record(&mut self, len: usize, plain: &mut BytesMut) -> Result<(), SecureError> {
        let State::Open { transport, .. } = &mut self.state else { return Err(SecureError::Broken) };
        if len < TAG {
            return Err(SecureError::BadRecord);
        }
        let at = plain.len();
        plain.resize(at + len, 0);
        let res = transport.read_message(&self.rx[2..2 + len], &mut plain[at..]);
        self.rx.advance(2 + len);
        match res {
            Ok(n) => {
                plain.truncate(at + n);
                Ok(())
            }
            Err(_) => {
                plain.truncate(at);
                Err(SecureError::BadRecord)
            }
        }
    }
}
