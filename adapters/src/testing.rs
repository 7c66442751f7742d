//! A tiny ping/pong [`Machine`] for the adapters' tests and benchmarks: it answers
//! every ping with a pong carrying the same payload, and reports pongs, send
//! failures and wake-ups as events.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Instant;

use bytes::Bytes;
use p2pmp_core::machine::{Action, Machine, NodeAddr};
use p2pmp_core::wire::Envelope;
use serde::{Deserialize, Serialize};

/// The two messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PingMsg {
    Ping { seq: u64 },
    Pong { seq: u64 },
}

/// What a test asks of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingCmd {
    /// Send a ping with `payload` after its header.
    Ping { to: NodeAddr, seq: u64, payload: Bytes },
    /// Report [`PingEvent::Woke`] once `at` has passed.
    WakeAt(Instant),
}

/// What the machine reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingEvent {
    Pong { from: NodeAddr, seq: u64, payload: Bytes },
    SendFailed(NodeAddr),
    Woke(Instant),
}

/// The machine. See the module docs.
#[derive(Debug)]
pub struct PingPong {
    addr: NodeAddr,
    out: VecDeque<Action<PingMsg, PingEvent>>,
    wake: Option<Instant>,
    /// Pings answered so far.
    pub pings_served: u64,
}

impl PingPong {
    pub fn new(addr: NodeAddr) -> Self {
        PingPong { addr, out: VecDeque::new(), wake: None, pings_served: 0 }
    }

    fn env(&self, request_id: u64, body: PingMsg) -> Envelope<PingMsg> {
        Envelope::new(self.addr.id(), self.addr, request_id, body)
    }
}

impl Machine for PingPong {
    type Body = PingMsg;
    type Command = PingCmd;
    type Event = PingEvent;
    type CmdError = Infallible;

    fn addr(&self) -> NodeAddr {
        self.addr
    }

    fn handle_message(&mut self, _now: Instant, msg: Envelope<PingMsg>) {
        match msg.body {
            PingMsg::Ping { seq } => {
                self.pings_served += 1;
                let reply = self.env(msg.request_id, PingMsg::Pong { seq }).with_payload(msg.payload);
                self.out.push_back(Action::Send { to: msg.sender_addr, msg: reply });
            }
            PingMsg::Pong { seq } => {
                let e = PingEvent::Pong { from: msg.sender_addr, seq, payload: msg.payload };
                self.out.push_back(Action::Event(e));
            }
        }
    }

    fn handle_send_failed(&mut self, _now: Instant, to: NodeAddr) {
        self.out.push_back(Action::Event(PingEvent::SendFailed(to)));
    }

    fn handle_command(&mut self, _now: Instant, cmd: PingCmd) -> Result<(), Infallible> {
        match cmd {
            PingCmd::Ping { to, seq, payload } => {
                let msg = self.env(seq, PingMsg::Ping { seq }).with_payload(payload);
                self.out.push_back(Action::Send { to, msg });
            }
            PingCmd::WakeAt(at) => self.wake = Some(self.wake.map_or(at, |w| w.min(at))),
        }
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(w) = self.wake.filter(|&w| w <= now) {
            self.wake = None;
            self.out.push_back(Action::Event(PingEvent::Woke(w)));
        }
    }

    fn poll_action(&mut self) -> Option<Action<PingMsg, PingEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.wake
    }
}
