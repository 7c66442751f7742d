//! Connection-level messages shared by every protocol.

use serde::{Deserialize, Serialize};

use crate::machine::NodeAddr;
use crate::overlay::OverlayKind;

/// Opens every connection: which network the peer belongs to and where it listens,
/// so a node never joins a stranger's overlay by accident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Networks with different ids refuse each other.
    pub network_id: u64,
    /// The address the peer accepts connections on.
    pub listen: NodeAddr,
    /// The overlay the peer's network runs, if it runs one: a network runs one
    /// overlay, so peers of different kinds (or CAN shapes) refuse each other.
    pub overlay: Option<OverlayKind>,
}

/// Closes a connection with a reason a person can read in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Goodbye {
    /// The node is leaving the network.
    Leaving,
    /// The peer sent something unacceptable.
    ProtocolError,
    /// Wrong network id in the hello.
    WrongNetwork,
}
