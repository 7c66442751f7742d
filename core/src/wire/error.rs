use thiserror::Error;

/// Bytes that cannot be a frame or an envelope. Always the peer's fault: the
/// adapter drops the connection with this as the logged reason.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The length prefix announces more than the configured maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge { len: u64, max: usize },
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({buffered} bytes buffered)")]
    Truncated { buffered: usize },
    /// The envelope header does not decode.
    #[error("malformed envelope: {0}")]
    Malformed(#[from] postcard::Error),
    /// The peer speaks another protocol version.
    #[error("protocol version {got}, expected {expected}")]
    WrongVersion { got: u16, expected: u16 },
}
