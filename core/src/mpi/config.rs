//! Engine configuration.

use std::time::Duration;

use super::MpiError;

/// Tunables of one [`super::MpiEngine`]. Every rank of a job must use the same
/// `eager_window`: a sender starts with the credit it assumes its peer granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiConfig {
    /// Largest message sent eagerly, in bytes (default 64 KiB; at most the wire's
    /// maximum frame size less 1 KiB). Larger ones use rendezvous.
    pub eager_threshold: usize,
    /// Eager credit each receiver grants each sender, in bytes (default 1 MiB). The
    /// unexpected-message buffer holds at most this much per peer, so at most
    /// `eager_window * (size - 1)` in all.
    pub eager_window: u64,
    /// Credit charged per eager message on top of its length (default 64), which
    /// bounds the number of buffered messages as well as their bytes.
    pub eager_msg_overhead: u64,
    /// Largest rendezvous data chunk per frame, in bytes (default 4 MiB; at most the
    /// wire's maximum frame size less 1 KiB). Messages up to this size arrive
    /// without a copy of the driver's read buffer (the MPI transport copies a
    /// payload of up to 64 bytes out of it instead); larger ones are
    /// reassembled with one copy.
    pub data_chunk: usize,
    /// Send a stand-alone acknowledgement after this many unacknowledged frames
    /// (default 64).
    pub ack_every_msgs: u32,
    /// ... or after this many unacknowledged payload bytes (default 256 KiB).
    pub ack_every_bytes: u64,
    /// ... or this long after the first unacknowledged frame, unless a frame to the
    /// peer carried the acknowledgement first (default 1 ms).
    pub ack_delay: Duration,
}

impl Default for MpiConfig {
    fn default() -> Self {
        MpiConfig {
            eager_threshold: 64 << 10,
            eager_window: 1 << 20,
            eager_msg_overhead: 64,
            data_chunk: 4 << 20,
            ack_every_msgs: 64,
            ack_every_bytes: 256 << 10,
            ack_delay: Duration::from_millis(1),
        }
    }
}

impl MpiConfig {
    /// Checks that the configuration can work.
    pub fn validate(&self) -> Result<(), MpiError> {
        if self.data_chunk == 0 {
            return Err(MpiError::InvalidConfig("data_chunk must be positive"));
        }
        // Room for the envelope header within the wire's largest frame.
        let max_data = crate::wire::DEFAULT_MAX_FRAME - 1024;
        if self.data_chunk > max_data || self.eager_threshold > max_data {
            return Err(MpiError::InvalidConfig("eager_threshold and data_chunk must fit in one wire frame"));
        }
        if self.ack_every_msgs == 0 {
            return Err(MpiError::InvalidConfig("ack_every_msgs must be positive"));
        }
        Ok(())
    }

    /// Credit an eager message of `len` bytes costs.
    pub(crate) fn charge(&self, len: usize) -> u64 {
        len as u64 + self.eager_msg_overhead
    }
}
