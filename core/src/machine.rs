//! The one shape of the overlay and job machines: the Chord and CAN nodes
//! ([`crate::chord::ChordNode`], [`crate::can::CanNode`]), the job submitter and
//! executor ([`crate::job::Submitter`], [`crate::job::Execution`]) and the
//! daemon's composite node ([`crate::node::DaemonNode`]), which the adapters'
//! `Driver` and the simulator ([`crate::sim`]) both drive.
//!
//! The MPI engine ([`crate::mpi::MpiEngine`]) and its link machine
//! ([`crate::mpi::Links`]) are sans-IO in the same way (inputs with `now`,
//! `poll_*` outputs, timers in a [`crate::time::TimerTable`]) but do not
//! implement this trait, so MPI ranks do not run in [`crate::sim`]:
//! - the engine needs a *stream* between two ranks: frames arrive in order and
//!   exactly once until the stream breaks, and a break is reported; it resends
//!   only after a reconnect. This trait's [`Action::Send`] is a datagram the
//!   simulator may lose silently ([`crate::sim::NetConfig::loss`]), and one lost
//!   frame would stall a stream forever;
//! - the link machine opens connections and waits for their outcome (connect
//!   requests out; connected / failed in); this trait knows no connections, only
//!   [`Machine::handle_send_failed`] after the fact;
//! - peers are ranks found by resolving their process keys through the local
//!   node, not overlay addresses: a resolve is a request whose answer arrives
//!   later ([`crate::mpi::Links::handle_resolved`]), which this trait has no
//!   input for;
//! - the application calls the engine synchronously and gets request ids back
//!   ([`crate::mpi::MpiEngine::isend`]); [`Machine::handle_command`] returns
//!   only success or misuse.
//!
//! Running ranks in the simulator needs a stream model there (ordered,
//! lossless until a reported break) and connection and resolve inputs; the
//! engine's own tests drive it over such in-memory streams instead
//! (`core/src/mpi/tests/harness.rs`), and the link machine against a scripted
//! driver (`core/src/mpi/link/tests.rs`).
//!
//! Contract: after any `handle_*` call, the driver drains [`Machine::poll_action`]
//! until it returns `None`, then reads [`Machine::poll_timeout`] and calls
//! [`Machine::handle_timeout`] no earlier than that instant. Time always comes in as
//! an argument; a machine never reads a clock.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::id::Id;
use crate::wire::Envelope;

/// A node's advertised transport address (`ip:port`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeAddr(pub SocketAddr);

impl NodeAddr {
    /// An IPv4 loopback-range address, handy for simulations and tests: the `n`th
    /// address of 127.0.0.0/8 above 127.0.0.1 (wrapping inside /8), on `port`.
    pub fn loopback(n: u32, port: u16) -> Self {
        let host = (n % 0x00ff_fffe) + 1;
        NodeAddr(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x7f00_0000 | host)), port))
    }

    /// The node id an address maps to: SHA-1 of its `ip:port` text.
    pub fn id(&self) -> Id {
        Id::hash(self.0.to_string())
    }
}

impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for NodeAddr {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(NodeAddr)
    }
}

impl From<SocketAddr> for NodeAddr {
    fn from(a: SocketAddr) -> Self {
        NodeAddr(a)
    }
}

/// What a machine asks its driver to do.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum Action<B, E> {
    /// Deliver `msg` to the node listening at `to`. A failure to deliver comes back
    /// as [`Machine::handle_send_failed`].
    Send { to: NodeAddr, msg: Envelope<B> },
    /// Report something to the application (a lookup result, a state change, ...).
    Event(E),
}

/// A sans-IO protocol machine.
pub trait Machine {
    /// The message bodies this machine exchanges, carried inside an [`Envelope`].
    type Body: Serialize + DeserializeOwned + Clone + fmt::Debug;
    /// What the application asks of the machine.
    type Command;
    /// What the machine reports to the application.
    type Event;
    /// A command that cannot be carried out (API misuse, never peer input).
    type CmdError: std::error::Error;

    /// The machine's own address, stamped on its envelopes.
    fn addr(&self) -> NodeAddr;
    /// A message arrived. Bad peer input is dropped and counted, never an error.
    fn handle_message(&mut self, now: Instant, msg: Envelope<Self::Body>);
    /// The driver could not deliver a message to `to` (refused, reset, unreachable).
    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr);
    /// The application asks for something.
    fn handle_command(&mut self, now: Instant, cmd: Self::Command) -> Result<(), Self::CmdError>;
    /// Time passed; fires every expired timer. Spurious calls are no-ops.
    fn handle_timeout(&mut self, now: Instant);
    /// The next thing to do, or `None` once drained.
    fn poll_action(&mut self) -> Option<Action<Self::Body, Self::Event>>;
    /// When [`Machine::handle_timeout`] should next be called.
    fn poll_timeout(&self) -> Option<Instant>;
}
