//! Local control connections: the second kind of connection a node serves,
//! beside its peers. Processes and tools of the node's own host connect to a
//! loopback control listener and speak the local node protocol (ranks) or the
//! tool protocol (`p2pjob`); [`LocalConns`] turns their bytes into the machine's
//! commands and routes the machine's replies back to the right connection,
//! written once for every shell and tested without sockets. What the bytes
//! mean is the machine's business: a [`LocalCodec`] says it ([`DaemonCodec`]
//! for the daemon node).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use p2pmp_core::guard::{GuardConfig, TokenBucket};
use p2pmp_core::local::LocalRequest;
use p2pmp_core::machine::{Machine, NodeAddr};
use p2pmp_core::node::control::{TOOL_PREFACE, ToolRequest};
use p2pmp_core::node::{DaemonNode, NodeCommand, NodeEvent};
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};
use tracing::{debug, warn};

use crate::Driver;

/// Most bytes queued towards one local connection before it is closed (a tool
/// that stopped reading must not make the node hold its output forever).
const MAX_LOCAL_TX: usize = 256 << 20;

/// What the bytes of local connections mean to a machine.
pub trait LocalCodec<M: Machine>: Send {
    /// Bytes arrived on local connection `conn`: the commands they carry, or
    /// why the connection must be closed.
    fn bytes(&mut self, conn: u64, data: &[u8]) -> Result<Vec<M::Command>, String>;
    /// Local connection `conn` closed: the command that tells the machine.
    fn closed(&mut self, conn: u64) -> Option<M::Command>;
    /// An event of the machine: a reply to write to a local connection
    /// (`Ok`), or the event itself for the application (`Err`).
    fn reply(&mut self, ev: M::Event) -> Result<(u64, Bytes), M::Event>;
}

/// Every local connection of one node, their queued replies, and the codec.
/// The guard applies here too: at most `max_conns` local connections, each
/// held to `frames_per_s` requests (a flood closes the connection).
pub struct LocalConns<M: Machine> {
    codec: Box<dyn LocalCodec<M>>,
    guard: GuardConfig,
    next: u64,
    open: BTreeSet<u64>,
    /// Requests each open connection may still send before it counts as a flood.
    budget: BTreeMap<u64, TokenBucket>,
    /// Local connections refused for being one too many, and closed for flooding.
    refused: u64,
    cut_off: u64,
    tx: BTreeMap<u64, VecDeque<Bytes>>,
    writable: VecDeque<u64>,
    /// Connections to close (bad input, or a reader too slow).
    close: VecDeque<u64>,
}

impl<M: Machine> fmt::Debug for LocalConns<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalConns").field("open", &self.open.len()).finish_non_exhaustive()
    }
}

impl<M: Machine> LocalConns<M> {
    pub fn new(codec: impl LocalCodec<M> + 'static) -> Self {
        LocalConns {
            codec: Box::new(codec),
            guard: GuardConfig::default(),
            next: 0,
            open: BTreeSet::new(),
            budget: BTreeMap::new(),
            refused: 0,
            cut_off: 0,
            tx: BTreeMap::new(),
            writable: VecDeque::new(),
            close: VecDeque::new(),
        }
    }

    /// The same, held to `guard` (the node's: the same knobs as its peers).
    pub fn guarded(mut self, guard: &GuardConfig) -> Self {
        self.guard = guard.clone();
        self
    }

    /// A local connection was accepted: its number, or `None` when `max_conns`
    /// are open already (the shell closes the socket).
    pub fn on_accepted(&mut self, now: Instant) -> Option<u64> {
        if self.open.len() >= self.guard.max_conns {
            self.refused += 1;
            if self.refused.is_power_of_two() {
                warn!(open = self.open.len(), refused = self.refused, "refusing local connections: too many open");
            }
            return None;
        }
        self.next += 1;
        self.open.insert(self.next);
        self.budget.insert(self.next, TokenBucket::new(self.guard.frames_per_s, self.guard.frame_burst, now));
        Some(self.next)
    }

    /// Local connections (refused for one too many, closed for flooding) so far.
    pub fn refused_and_cut_off(&self) -> (u64, u64) {
        (self.refused, self.cut_off)
    }

    /// Bytes from local connection `conn`, fed to the machine as commands.
    pub fn on_bytes(&mut self, driver: &mut Driver<M>, now: Instant, conn: u64, data: &[u8]) {
        if !self.open.contains(&conn) {
            return;
        }
        let decoded = self.codec.bytes(conn, data).and_then(|cmds| {
            let within = self.budget.get_mut(&conn).is_none_or(|b| b.try_take(now, cmds.len() as u64));
            within.then_some(cmds).ok_or_else(|| {
                self.cut_off += 1;
                format!("flooding: over {} requests a second", self.guard.frames_per_s)
            })
        });
        match decoded {
            Ok(cmds) => {
                for cmd in cmds {
                    if driver.on_command(now, cmd).is_err() {
                        debug!(conn, "the node refused a local request");
                    }
                }
            }
            Err(why) => {
                warn!(conn, why, "closing a local connection");
                self.close.push_back(conn);
                self.on_closed(driver, now, conn);
            }
        }
    }

    /// Local connection `conn` closed (or is being closed).
    pub fn on_closed(&mut self, driver: &mut Driver<M>, now: Instant, conn: u64) {
        if self.open.remove(&conn) {
            self.tx.remove(&conn);
            self.budget.remove(&conn);
            if let Some(cmd) = self.codec.closed(conn) {
                let _ = driver.on_command(now, cmd);
            }
        }
    }

    /// Takes the machine's events: replies go to their connections' queues,
    /// the rest come back for the application.
    pub fn route(&mut self, ev: M::Event) -> Option<M::Event> {
        match self.codec.reply(ev) {
            Ok((conn, bytes)) => {
                if self.open.contains(&conn) {
                    let q = self.tx.entry(conn).or_default();
                    if q.is_empty() {
                        self.writable.push_back(conn);
                    }
                    q.push_back(bytes);
                    if q.iter().map(Bytes::len).sum::<usize>() > MAX_LOCAL_TX {
                        self.close.push_back(conn);
                    }
                }
                None
            }
            Err(ev) => Some(ev),
        }
    }

    /// A connection with bytes to write since the last call.
    pub fn poll_writable(&mut self) -> Option<u64> {
        self.writable.pop_front()
    }

    /// A connection the shell must close.
    pub fn poll_close(&mut self) -> Option<u64> {
        self.close.pop_front()
    }

    /// Everything queued for `conn`, in order.
    pub fn take_tx(&mut self, conn: u64) -> Vec<Bytes> {
        self.tx.get_mut(&conn).map(|q| q.drain(..).collect()).unwrap_or_default()
    }

    /// Local connections open now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no local connection is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// Which protocol a daemon's local connection speaks, told by its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A rank: frames of `Envelope<LocalRequest>` from the first byte (a frame
    /// length, whose first byte is 0 for any frame under 16 MiB).
    Rank,
    /// A tool: [`TOOL_PREFACE`], then frames of `Envelope<ToolRequest>`.
    Tool,
}

#[derive(Debug, Default)]
struct ConnState {
    kind: Option<Kind>,
    head: Vec<u8>,
    dec: FrameDecoder,
}

/// The daemon node's local protocols: ranks and `p2pjob` on one listener.
#[derive(Debug)]
pub struct DaemonCodec {
    /// The control address, stamped on replies.
    me: NodeAddr,
    conns: BTreeMap<u64, ConnState>,
}

impl DaemonCodec {
    pub fn new(control: NodeAddr) -> Self {
        DaemonCodec { me: control, conns: BTreeMap::new() }
    }

    fn frame<B: serde::Serialize>(&self, request_id: u64, body: B, payload: Bytes) -> Option<Bytes> {
        let env = Envelope::new(self.me.id(), self.me, request_id, body).with_payload(payload);
        let mut buf = BytesMut::new();
        match encode_frame(&env, &mut buf, DEFAULT_MAX_FRAME) {
            Ok(()) => Some(buf.freeze()),
            Err(e) => {
                debug!(%e, "cannot encode a reply");
                None
            }
        }
    }
}

impl LocalCodec<DaemonNode> for DaemonCodec {
    fn bytes(&mut self, conn: u64, mut data: &[u8]) -> Result<Vec<NodeCommand>, String> {
        let st = self.conns.entry(conn).or_default();
        if st.kind.is_none() {
            if st.head.is_empty() && data.first().is_some_and(|b| *b != TOOL_PREFACE[0]) {
                st.kind = Some(Kind::Rank);
            } else {
                let take = (TOOL_PREFACE.len() - st.head.len()).min(data.len());
                st.head.extend_from_slice(&data[..take]);
                data = &data[take..];
                if st.head.len() < TOOL_PREFACE.len() {
                    return Ok(Vec::new());
                }
                if st.head != TOOL_PREFACE {
                    return Err("bad preface".into());
                }
                st.kind = Some(Kind::Tool);
            }
        }
        st.dec.push(data);
        let mut cmds = Vec::new();
        while let Some(frame) = st.dec.decode().map_err(|e| format!("bad frame: {e}"))? {
            let cmd = match st.kind {
                Some(Kind::Tool) => decode_envelope::<ToolRequest>(frame).map(|env| NodeCommand::Tool {
                    conn,
                    request_id: env.request_id,
                    req: env.body,
                }),
                _ => decode_envelope::<LocalRequest>(frame).map(|env| NodeCommand::Local {
                    conn,
                    request_id: env.request_id,
                    req: env.body,
                }),
            };
            cmds.push(cmd.map_err(|e| format!("bad request: {e}"))?);
        }
        Ok(cmds)
    }

    fn closed(&mut self, conn: u64) -> Option<NodeCommand> {
        self.conns.remove(&conn);
        Some(NodeCommand::ConnClosed { conn })
    }

    fn reply(&mut self, ev: NodeEvent) -> Result<(u64, Bytes), NodeEvent> {
        let framed = match ev {
            NodeEvent::Reply { conn, request_id, reply } => (conn, self.frame(request_id, reply, Bytes::new())),
            NodeEvent::ToolReply { conn, request_id, reply, payload } => (conn, self.frame(request_id, reply, payload)),
            other => return Err(other),
        };
        match framed {
            (conn, Some(bytes)) => Ok((conn, bytes)),
            // Unencodable (never for these types): nothing to write.
            (conn, None) => Ok((conn, Bytes::new())),
        }
    }
}

/// A codec for machines with no local connections: nothing is ever a reply.
#[derive(Debug, Default)]
pub struct NoLocal;

impl<M: Machine> LocalCodec<M> for NoLocal {
    fn bytes(&mut self, _conn: u64, _data: &[u8]) -> Result<Vec<M::Command>, String> {
        Err("this node serves no local connections".into())
    }

    fn closed(&mut self, _conn: u64) -> Option<M::Command> {
        None
    }

    fn reply(&mut self, ev: M::Event) -> Result<(u64, Bytes), M::Event> {
        Err(ev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2pmp_core::id::Id;
    use p2pmp_core::local::LocalReply;
    use p2pmp_core::node::control::ToolReply;

    fn frame<B: serde::Serialize>(request_id: u64, body: B) -> Vec<u8> {
        let me = NodeAddr("127.0.0.1:1".parse().unwrap());
        let mut buf = BytesMut::new();
        encode_frame(&Envelope::new(me.id(), me, request_id, body), &mut buf, DEFAULT_MAX_FRAME).unwrap();
        buf.to_vec()
    }

    #[test]
    fn a_tool_and_a_rank_are_told_apart_and_their_frames_decoded_whatever_the_chunking() {
        let mut tool = TOOL_PREFACE.to_vec();
        tool.extend(frame(7, ToolRequest::Nodes));
        tool.extend(frame(8, ToolRequest::Status { job: None }));
        let rank = frame(3, LocalRequest::Resolve { key: Id::hash("k") });
        for chunk in [1, 3, 8, 1000] {
            let mut c = DaemonCodec::new(NodeAddr("127.0.0.1:2".parse().unwrap()));
            let mut cmds = Vec::new();
            for piece in tool.chunks(chunk) {
                cmds.extend(c.bytes(1, piece).unwrap());
            }
            for piece in rank.chunks(chunk) {
                cmds.extend(c.bytes(2, piece).unwrap());
            }
            assert_eq!(
                cmds,
                [
                    NodeCommand::Tool { conn: 1, request_id: 7, req: ToolRequest::Nodes },
                    NodeCommand::Tool { conn: 1, request_id: 8, req: ToolRequest::Status { job: None } },
                    NodeCommand::Local { conn: 2, request_id: 3, req: LocalRequest::Resolve { key: Id::hash("k") } },
                ],
                "chunks of {chunk}"
            );
        }
        let mut c = DaemonCodec::new(NodeAddr("127.0.0.1:2".parse().unwrap()));
        assert!(c.bytes(5, b"P2PJOB9\n").is_err(), "a wrong preface closes the connection");
        let mut bad = TOOL_PREFACE.to_vec();
        bad.extend([0, 0, 0, 3, 9, 9, 9]);
        assert!(c.bytes(6, &bad).is_err(), "a bad frame closes the connection");
        assert_eq!(c.closed(6), Some(NodeCommand::ConnClosed { conn: 6 }));
    }

    #[test]
    fn replies_go_to_their_open_connection_and_other_events_to_the_application() {
        let mut local: LocalConns<DaemonNode> =
            LocalConns::new(DaemonCodec::new(NodeAddr("127.0.0.1:2".parse().unwrap())));
        let a = local.on_accepted(Instant::now()).unwrap();
        let reply = NodeEvent::Reply { conn: a, request_id: 4, reply: LocalReply::Unregistered { key: Id::ZERO } };
        assert_eq!(local.route(reply), None);
        let tool = NodeEvent::ToolReply {
            conn: a,
            request_id: 5,
            reply: ToolReply::Values { values: vec![] },
            payload: Bytes::from_static(b"xy"),
        };
        assert_eq!(local.route(tool), None);
        assert_eq!(local.poll_writable(), Some(a));
        let bytes: Vec<u8> = local.take_tx(a).concat();
        let mut dec = FrameDecoder::default();
        dec.push(&bytes);
        let first: Envelope<LocalReply> = decode_envelope(dec.decode().unwrap().unwrap()).unwrap();
        let second: Envelope<ToolReply> = decode_envelope(dec.decode().unwrap().unwrap()).unwrap();
        assert_eq!((first.request_id, second.request_id, &second.payload[..]), (4, 5, &b"xy"[..]));
        // A reply to a connection that is gone is dropped; anything else is the application's.
        let gone = NodeEvent::Reply { conn: 99, request_id: 1, reply: LocalReply::Unregistered { key: Id::ZERO } };
        assert_eq!(local.route(gone), None);
        assert!(local.take_tx(99).is_empty());
        let other = NodeEvent::RemoveDir { path: "/x".into() };
        assert_eq!(local.route(other.clone()), Some(other));
    }

    #[test]
    fn local_connections_are_capped_and_a_flooding_one_is_closed() {
        use crate::DriverConfig;
        use p2pmp_core::job::Resources;
        use p2pmp_core::node::DaemonConfig;
        let now = Instant::now();
        let me = NodeAddr("127.0.0.1:9000".parse().unwrap());
        let dc = DaemonConfig::new(Resources::default(), "127.0.0.1:9001", "/w", 1);
        let mut driver = Driver::new(DaemonNode::new(dc, me, now), DriverConfig::default(), now);
        let guard = GuardConfig { max_conns: 2, frames_per_s: 10, frame_burst: 5, ..GuardConfig::default() };
        let mut local: LocalConns<DaemonNode> =
            LocalConns::new(DaemonCodec::new(NodeAddr("127.0.0.1:9001".parse().unwrap()))).guarded(&guard);
        let (calm, flood) = (local.on_accepted(now).unwrap(), local.on_accepted(now).unwrap());
        assert_eq!(local.on_accepted(now), None, "two at most");
        let requests = |n: u64| {
            let mut b = TOOL_PREFACE.to_vec();
            (0..n).for_each(|i| b.extend(frame(i, ToolRequest::Nodes)));
            b
        };
        local.on_bytes(&mut driver, now, calm, &requests(5));
        local.on_bytes(&mut driver, now, flood, &requests(6));
        assert_eq!(local.poll_close(), Some(flood), "six requests at once are a flood");
        assert_eq!(local.poll_close(), None, "five are not");
        assert_eq!((local.len(), local.refused_and_cut_off()), (1, (1, 1)));
        assert!(local.on_accepted(now).is_some(), "the closed one freed its place");
    }
}
