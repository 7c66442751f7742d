//! The wire format: one envelope for every message, postcard-encoded, inside
//! length-prefixed frames.
//!
//! ```text
//! frame    = len:u32-be  header  payload
//! header   = postcard(version:u16, sender:Id, sender_addr:NodeAddr, request_id:u64, body:B)
//! payload  = raw bytes up to the end of the frame (MPI data, file chunks); often empty
//! ```
//!
//! Machines never see bytes: they exchange [`Envelope`]s, and only drivers and the
//! simulator call [`encode_frame`] / [`FrameDecoder`] / [`decode_envelope`].
//! [`Calls`] is the client side of a request/reply exchange on one connection
//! (a rank or a tool and its node), written once for every client.
//! postcard encodes enum variants by index, so message enums are append-only.

mod calls;
mod envelope;
mod error;
mod frame;
mod msg;
pub mod vectored;

pub use calls::Calls;
pub(crate) use envelope::frame_len;
pub use envelope::{
    Envelope, HeaderPrefix, decode_after_prefix, decode_envelope, encode_frame, encode_frame_head,
    encode_frame_head_prefixed, encode_frame_parts, round_trip,
};
pub use error::WireError;
pub use frame::{DEFAULT_MAX_FRAME, FrameDecoder, LEN_PREFIX};
pub use msg::{Goodbye, Hello};

/// The protocol version every envelope carries; a peer speaking another is refused.
///
/// 2: an MPI message travels in its fixed form (`mpi::msg::form`), and a
/// job's Guard carries its past.
pub const PROTOCOL_VERSION: u16 = 2;

#[cfg(test)]
mod tests;
