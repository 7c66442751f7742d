//! An engine saved for a process that resumes elsewhere while its peers go
//! on (one rank moving alone): per peer, the sequence numbers and credit of
//! both streams; the frames the peer has not acknowledged; and the messages
//! received and not yet taken by a receive.
//!
//! Saving is the process's last act: nothing is received or acknowledged
//! after it. The fresh engine restored from it ([`MpiEngine::restore`])
//! resends every frame its peers lack and acknowledges what it holds; the
//! peers, who lost their connection to the old process, resend what it never
//! acknowledged, and the duplicates are dropped by sequence number. So no
//! message is lost or taken twice across the move.
//!
//! Only a quiet engine is saved ([`MpiEngine::save`]): no receive posted, no
//! rendezvous under way in either direction, no send or cancel the
//! application still follows, no message to itself waiting. Those hold
//! requests of the old process, which the new one does not have.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::engine::MpiEngine;
use super::flow::Peer;
use super::msg::MpiMsg;
use super::queues::{Held, Key, Origin, Unexpected};
use super::{MpiConfig, MpiError};

/// Bound of every saved counter (sequence numbers, cumulative credit): far
/// beyond what a run reaches, far enough below `u64::MAX` that adding to one
/// never overflows.
const MAX_COUNTER: u64 = 1 << 62;

/// What an engine keeps about one peer, as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SavedPeer {
    next_seq: u64,
    credit_limit: u64,
    charged: u64,
    recv_next: u64,
    granted: u64,
    heard: bool,
}

/// A frame the peer `to` has not acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SavedFrame {
    to: u32,
    msg: MpiMsg,
    payload: Bytes,
}

/// A message received and not yet taken, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SavedMessage {
    comm: u32,
    src: u32,
    tag: i32,
    /// The sequence number of its Eager or Rts frame.
    seq: u64,
    held: SavedHeld,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum SavedHeld {
    Eager { data: Bytes, charge: u64 },
    Rts { rts_seq: u64, len: u64 },
}

/// An engine's state, saved by [`MpiEngine::save`] and encoded with
/// [`SavedEngine::encode`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedEngine {
    rank: u32,
    size: u32,
    next_req: u64,
    /// Indexed by rank; our own entry is unused.
    peers: Vec<SavedPeer>,
    unacked: Vec<SavedFrame>,
    unexpected: Vec<SavedMessage>,
}

/// Why an engine cannot be saved now, or a saved one not restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaveError {
    /// Something under way holds requests of this process.
    #[error("the engine is not quiet: {0}")]
    NotQuiet(&'static str),
    /// The bytes are no saved engine.
    #[error("saved engine state is malformed: {0}")]
    Malformed(String),
    /// A saved engine of another rank or world.
    #[error("saved engine of rank {rank} of {size}, this is rank {want_rank} of {want_size}")]
    Other { rank: u32, size: u32, want_rank: u32, want_size: u32 },
    /// The configuration of the new engine cannot work.
    #[error(transparent)]
    Engine(#[from] MpiError),
}

impl SavedEngine {
    /// The bytes of this state.
    pub fn encode(&self) -> Vec<u8> {
        // Invariant: every field serializes (no maps with non-string keys, no floats).
        postcard::to_allocvec(self).expect("a saved engine always encodes")
    }

    /// Decodes state of at most `max` bytes (untrusted: a checkpoint file).
    pub fn decode(bytes: &[u8], max: usize) -> Result<SavedEngine, SaveError> {
        if bytes.len() > max {
            return Err(SaveError::Malformed(format!("{} bytes, at most {max} expected", bytes.len())));
        }
        match postcard::take_from_bytes::<SavedEngine>(bytes) {
            Ok((s, [])) => Ok(s),
            Ok((_, rest)) => Err(SaveError::Malformed(format!("{} bytes left over", rest.len()))),
            Err(e) => Err(SaveError::Malformed(e.to_string())),
        }
    }

    /// The rank it was saved by.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The size of the world it was saved in.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Frames saved for the peers, and messages saved unreceived.
    pub fn counts(&self) -> (usize, usize) {
        (self.unacked.len(), self.unexpected.len())
    }

    /// Whether it holds together for an engine of `config`: one entry per
    /// rank, sequenced frames numbered in order below each stream's next
    /// number (data only on frames that carry it), messages from peers
    /// numbered below what their streams delivered, each charged what
    /// `config` charges and within each peer's credit window. A restored
    /// engine relies on it.
    fn check(&self, config: &MpiConfig) -> Result<(), SaveError> {
        let bad = |why: String| Err(SaveError::Malformed(why));
        if self.size == 0 || self.rank >= self.size || self.peers.len() != self.size as usize {
            return bad(format!("rank {} of {} with {} peer entries", self.rank, self.size, self.peers.len()));
        }
        if let Some(p) = self.peers.iter().find(|p| p.next_seq == 0 || p.recv_next == 0) {
            return bad(format!("sequence numbers start at 1: {p:?}"));
        }
        // Cumulative counters grow by a message at a time: nowhere near this.
        let huge = |p: &SavedPeer| {
            [p.next_seq, p.recv_next, p.credit_limit, p.charged, p.granted].iter().any(|&v| v >= MAX_COUNTER)
        };
        if let Some(p) = self.peers.iter().find(|p| huge(p)) {
            return bad(format!("a counter beyond {MAX_COUNTER}: {p:?}"));
        }
        let mut last: Vec<Option<u64>> = vec![None; self.size as usize];
        for f in &self.unacked {
            let Some(hdr) = f.msg.hdr() else { return bad(format!("unsequenced frame {:?}", f.msg)) };
            if f.to >= self.size || f.to == self.rank {
                return bad(format!("frame to rank {}", f.to));
            }
            if !f.msg.carries_payload() && !f.payload.is_empty() {
                return bad(format!("data on a frame that carries none: {:?}", f.msg));
            }
            let peer = &self.peers[f.to as usize];
            let follows = last[f.to as usize].is_none_or(|prev| prev.checked_add(1) == Some(hdr.seq));
            if !follows || hdr.seq >= peer.next_seq {
                return bad(format!("frame {} to rank {} out of order", hdr.seq, f.to));
            }
            last[f.to as usize] = Some(hdr.seq);
        }
        for (to, seq) in last.iter().enumerate().filter_map(|(to, s)| Some((to, (*s)?))) {
            if seq + 1 != self.peers[to].next_seq {
                return bad(format!("frames to rank {to} end at {seq}, its stream at {}", self.peers[to].next_seq));
            }
        }
        let mut charged = vec![0u64; self.size as usize];
        for m in &self.unexpected {
            if m.src >= self.size || m.src == self.rank {
                return bad(format!("message from rank {}", m.src));
            }
            if m.seq == 0 || m.seq >= self.peers[m.src as usize].recv_next {
                return bad(format!("message {} from rank {} beyond what arrived", m.seq, m.src));
            }
            match &m.held {
                SavedHeld::Eager { data, charge } => {
                    let c = &mut charged[m.src as usize];
                    *c = c.saturating_add(*charge);
                    if *charge != config.charge(data.len()) || *c > config.eager_window {
                        return bad(format!("message {} from rank {} charged {charge}", m.seq, m.src));
                    }
                }
                SavedHeld::Rts { rts_seq, .. } if *rts_seq != m.seq => {
                    return bad(format!("request to send {rts_seq} saved as message {}", m.seq));
                }
                SavedHeld::Rts { .. } => {}
            }
        }
        Ok(())
    }
}

impl MpiEngine {
    /// This engine's state for a process that resumes elsewhere (see the
    /// module docs); only a quiet engine can be saved.
    pub fn save(&self) -> Result<SavedEngine, SaveError> {
        let busy = if self.posted_len() > 0 {
            Some("receives are posted")
        } else if !self.awaiting.is_empty() || self.peers.iter().any(|p| !p.rdv_out.is_empty()) {
            Some("a rendezvous is under way")
        } else if !self.sent.is_empty() || !self.cancelling.is_empty() {
            Some("sends are not released")
        } else if !self.completions.is_empty() {
            Some("completions are not taken")
        } else {
            None
        };
        if let Some(why) = busy {
            return Err(SaveError::NotQuiet(why));
        }
        let mut unexpected = Vec::with_capacity(self.unexpected.len());
        for u in self.unexpected.in_arrival_order() {
            let to_itself = SaveError::NotQuiet("a message to itself is waiting");
            let Origin::Peer { seq } = u.origin else { return Err(to_itself) };
            let held = match &u.held {
                Held::Eager { data, charge } => SavedHeld::Eager { data: data.clone().into_bytes(), charge: *charge },
                Held::Rts { rts_seq, len } => SavedHeld::Rts { rts_seq: *rts_seq, len: *len },
                Held::SelfSync { .. } => return Err(to_itself),
            };
            unexpected.push(SavedMessage { comm: u.key.comm, src: u.key.src, tag: u.key.tag, seq, held });
        }
        let peers = self
            .peers
            .iter()
            .map(|p| SavedPeer {
                next_seq: p.next_seq,
                credit_limit: p.credit_limit,
                charged: p.charged,
                recv_next: p.recv_next,
                granted: p.granted,
                heard: p.heard,
            })
            .collect();
        let unacked = (0..self.size)
            .flat_map(|to| self.peers[to as usize].unacked.iter().map(move |u| (to, u)))
            .map(|(to, u)| SavedFrame { to, msg: u.msg, payload: u.payload.clone().into_bytes() })
            .collect();
        Ok(SavedEngine { rank: self.rank, size: self.size, next_req: self.next_req, peers, unacked, unexpected })
    }

    /// A new engine for rank `rank` of `size` that goes on where `saved`
    /// stopped: its frames are queued again and every peer is owed an
    /// acknowledgement (as after a reconnect).
    pub fn restore(config: MpiConfig, rank: u32, size: u32, saved: SavedEngine) -> Result<Self, SaveError> {
        if (saved.rank, saved.size) != (rank, size) {
            let (want_rank, want_size) = (rank, size);
            return Err(SaveError::Other { rank: saved.rank, size: saved.size, want_rank, want_size });
        }
        saved.check(&config)?;
        let mut e = MpiEngine::new(config, rank, size)?;
        e.next_req = saved.next_req;
        for (p, s) in e.peers.iter_mut().zip(&saved.peers) {
            restore_peer(p, s);
        }
        for f in saved.unacked {
            // Checked: sequenced, in order, below the stream's next number.
            e.peers[f.to as usize].unacked.push_back(super::flow::Unacked { msg: f.msg, payload: f.payload.into() });
        }
        for m in saved.unexpected {
            let held = match m.held {
                SavedHeld::Eager { data, charge } => {
                    e.peers[m.src as usize].buffered += charge;
                    Held::Eager { data: data.into(), charge }
                }
                SavedHeld::Rts { rts_seq, len } => Held::Rts { rts_seq, len },
            };
            let key = Key { comm: m.comm, src: m.src, tag: m.tag };
            e.unexpected.push(Unexpected { key, held, origin: Origin::Peer { seq: m.seq } });
        }
        for peer in (0..size).filter(|&p| p != rank) {
            e.handle_reconnected(peer)?;
        }
        e.stats.resent = 0;
        Ok(e)
    }
}

fn restore_peer(p: &mut Peer, s: &SavedPeer) {
    p.next_seq = s.next_seq;
    p.credit_limit = s.credit_limit;
    p.charged = s.charged;
    p.recv_next = s.recv_next;
    p.granted = s.granted;
    p.announced = 0;
    p.heard = s.heard;
}

#[cfg(test)]
mod tests;
