//! The daemon's overlay node, Chord or CAN as configured: the one place the
//! daemon tells them apart. Their messages travel as [`NodeMsg::Chord`] and
//! [`NodeMsg::Can`]; a message of the other overlay is dropped here (the hello
//! refuses such peers before, see `wire::Hello`).

use std::time::Instant;

use super::NodeMsg;
use crate::can::{CanConfig, CanNode};
use crate::chord::{ChordConfig, ChordNode};
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::{CommandError, Overlay, OverlayCommand, OverlayEvent, OverlayKind};
use crate::wire::Envelope;

/// The overlay node of a daemon.
#[derive(Debug)]
pub enum OverlayNode {
    Chord(Box<ChordNode>),
    Can(Box<CanNode>),
}

macro_rules! each {
    ($self:expr, $n:ident => $e:expr) => {
        match $self {
            OverlayNode::Chord($n) => $e,
            OverlayNode::Can($n) => $e,
        }
    };
}

impl OverlayNode {
    /// CAN with `can` when given, else Chord with `chord`.
    pub(crate) fn new(
        chord: ChordConfig,
        can: Option<CanConfig>,
        addr: NodeAddr,
        bootstrap: Vec<NodeAddr>,
        now: Instant,
        seed: u64,
    ) -> Self {
        match can {
            Some(c) => OverlayNode::Can(Box::new(CanNode::new(c, addr, bootstrap, now, seed))),
            None => OverlayNode::Chord(Box::new(ChordNode::new(chord, addr, bootstrap, now, seed))),
        }
    }

    /// The overlay and shape this node runs.
    pub fn kind(&self) -> OverlayKind {
        each!(self, n => n.kind())
    }

    /// Part of a network now.
    pub fn is_joined(&self) -> bool {
        each!(self, n => n.is_joined())
    }

    /// The Chord node, if this is one.
    pub fn chord(&self) -> Option<&ChordNode> {
        match self {
            OverlayNode::Chord(n) => Some(n),
            OverlayNode::Can(_) => None,
        }
    }

    /// The CAN node, if this is one.
    pub fn can(&self) -> Option<&CanNode> {
        match self {
            OverlayNode::Can(n) => Some(n),
            OverlayNode::Chord(_) => None,
        }
    }

    pub(crate) fn handle_command(&mut self, now: Instant, cmd: OverlayCommand) -> Result<(), CommandError> {
        each!(self, n => n.handle_command(now, cmd))
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        each!(self, n => n.handle_timeout(now))
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        each!(self, n => n.poll_timeout())
    }

    pub(crate) fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        each!(self, n => n.handle_send_failed(now, to))
    }

    /// The next action, its message wrapped for the daemon's wire.
    pub(crate) fn poll_action(&mut self) -> Option<Action<NodeMsg, OverlayEvent>> {
        match self {
            OverlayNode::Chord(n) => n.poll_action().map(|a| wrap(a, NodeMsg::Chord)),
            OverlayNode::Can(n) => n.poll_action().map(|a| wrap(a, NodeMsg::Can)),
        }
    }

    /// An overlay message for this node; one of the other overlay is dropped.
    pub(crate) fn handle_message(&mut self, now: Instant, head: Envelope<()>, body: NodeMsg) {
        match (self, body) {
            (OverlayNode::Chord(n), NodeMsg::Chord(m)) => n.handle_message(now, head.map(|()| m)),
            (OverlayNode::Can(n), NodeMsg::Can(m)) => n.handle_message(now, head.map(|()| m)),
            _ => tracing::debug!(from = %head.sender_addr, "a message of the other overlay dropped"),
        }
    }
}

fn wrap<B>(a: Action<B, OverlayEvent>, f: fn(B) -> NodeMsg) -> Action<NodeMsg, OverlayEvent> {
    match a {
        Action::Send { to, msg } => Action::Send { to, msg: msg.map(f) },
        Action::Event(e) => Action::Event(e),
    }
}
