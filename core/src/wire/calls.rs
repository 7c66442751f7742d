//! The client side of a framed request/reply exchange on one connection: a
//! rank and its node (`p2pmp_mpi`'s node client), a tool and its daemon
//! (`p2pmp_jobd::Client`). Requests are numbered and framed; replies are
//! decoded with the number of the request they answer. Bytes only: the
//! caller's socket, blocking or not, moves them.

use std::fmt;
use std::marker::PhantomData;

use bytes::{Bytes, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, WireError, decode_envelope, encode_frame};
use crate::id::Id;
use crate::machine::NodeAddr;

/// Numbers and frames requests of type `Req`, decodes replies of type `Rep`.
pub struct Calls<Req, Rep> {
    me: Id,
    addr: NodeAddr,
    last_id: u64,
    dec: FrameDecoder,
    _kinds: PhantomData<fn(Req) -> Rep>,
}

impl<Req, Rep> fmt::Debug for Calls<Req, Rep> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calls")
            .field("me", &self.me)
            .field("addr", &self.addr)
            .field("last_id", &self.last_id)
            .field("buffered", &self.dec.buffered())
            .finish()
    }
}

impl<Req: Serialize, Rep: DeserializeOwned> Calls<Req, Rep> {
    /// Requests stamped with `me` and `addr`; the first is number 1.
    pub fn new(me: Id, addr: NodeAddr) -> Self {
        Calls { me, addr, last_id: 0, dec: FrameDecoder::new(DEFAULT_MAX_FRAME), _kinds: PhantomData }
    }

    /// The address later requests are stamped with.
    pub fn addr(&self) -> NodeAddr {
        self.addr
    }

    /// Stamps later requests with `addr`.
    pub fn set_addr(&mut self, addr: NodeAddr) {
        self.addr = addr;
    }

    /// Frames `req` as the next request: its number and its bytes.
    pub fn request(&mut self, req: Req) -> Result<(u64, BytesMut), WireError> {
        let id = self.last_id + 1;
        let mut buf = BytesMut::new();
        encode_frame(&Envelope::new(self.me, self.addr, id, req), &mut buf, DEFAULT_MAX_FRAME)?;
        self.last_id = id;
        Ok((id, buf))
    }

    /// Where bytes read from the connection go.
    pub fn decoder(&mut self) -> &mut FrameDecoder {
        &mut self.dec
    }

    /// The next whole reply read: (request number, reply, payload); `None`
    /// until more bytes arrive.
    pub fn next_reply(&mut self) -> Result<Option<(u64, Rep, Bytes)>, WireError> {
        let Some(frame) = self.dec.decode()? else { return Ok(None) };
        let env: Envelope<Rep> = decode_envelope(frame)?;
        Ok(Some((env.request_id, env.body, env.payload)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_numbered_and_replies_come_back_with_theirs() {
        let addr = NodeAddr::loopback(1, 7000);
        let mut calls = Calls::<String, String>::new(addr.id(), addr);
        let (a, frame_a) = calls.request("a".into()).unwrap();
        let (b, _) = calls.request("b".into()).unwrap();
        assert_eq!((a, b), (1, 2));
        let mut server = FrameDecoder::new(DEFAULT_MAX_FRAME);
        server.push(&frame_a);
        let env: Envelope<String> = decode_envelope(server.decode().unwrap().unwrap()).unwrap();
        assert_eq!((env.request_id, env.sender_addr, env.body.as_str()), (1, addr, "a"));

        let reply =
            Envelope::new(Id::hash("node"), addr, b, "for b".to_string()).with_payload(Bytes::from_static(b"p"));
        let mut bytes = BytesMut::new();
        encode_frame(&reply, &mut bytes, DEFAULT_MAX_FRAME).unwrap();
        let (head, tail) = bytes.split_at(3);
        calls.decoder().push(head);
        assert_eq!(calls.next_reply().unwrap(), None, "half a frame is no reply yet");
        calls.decoder().push(tail);
        assert_eq!(calls.next_reply().unwrap(), Some((2, "for b".to_string(), Bytes::from_static(b"p"))));
    }
}
