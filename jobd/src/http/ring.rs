//! The Chord ring as the page draws it: every node at its id with its
//! predecessor, successors and fingers. The daemon the page belongs to tells
//! its own ([`ToolReply::Ring`]); for every other node they are computed from
//! the node list, as a converged ring of those nodes has them, and labelled so.

use p2pmp_core::chord::ChordConfig;
use p2pmp_core::chord::check::RingTruth;
use p2pmp_core::id::{ID_BITS, Id};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::ToolReply;
use serde_json::{Value, json};

/// A node's neighbours on the ring, and whether the node said them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Neighbours {
    pub(crate) predecessor: Option<NodeAddr>,
    pub(crate) successors: Vec<NodeAddr>,
    /// `(first finger index, node)`, distinct nodes in index order, not the node itself.
    pub(crate) fingers: Vec<(u8, NodeAddr)>,
    pub(crate) told: bool,
}

impl Neighbours {
    /// What a [`ToolReply::Ring`] says, for the node that answered it.
    pub(crate) fn told(reply: &ToolReply) -> Option<(NodeAddr, Neighbours)> {
        let ToolReply::Ring { me, predecessor, successors, fingers } = reply else { return None };
        let n = Neighbours {
            predecessor: *predecessor,
            successors: successors.clone(),
            fingers: fingers.iter().copied().filter(|(_, a)| a != me).collect(),
            told: true,
        };
        Some((*me, n))
    }

    /// What node `at` (one of `ring`) has in a converged ring.
    pub(crate) fn computed(ring: &RingTruth, at: NodeAddr) -> Neighbours {
        let me = at.id();
        let others = ring.len().saturating_sub(1);
        let mut successors = Vec::new();
        let mut cursor = me;
        for _ in 0..others.min(ChordConfig::default().successors) {
            let (id, addr) = ring.successor(cursor);
            successors.push(addr);
            cursor = id;
        }
        let mut fingers: Vec<(u8, NodeAddr)> = Vec::new();
        if others > 0 {
            for i in 0..ID_BITS {
                let (_, addr) = ring.owner(me.add_pow2(i));
                if addr != at && fingers.last().is_none_or(|(_, last)| *last != addr) {
                    fingers.push((i as u8, addr));
                }
            }
        }
        let predecessor = (others > 0).then(|| ring.predecessor(me).1);
        Neighbours { predecessor, successors, fingers, told: false }
    }
}

/// Where `id` sits on the ring, from 0 (inclusive) to 1.
fn position(id: Id) -> f64 {
    id.high_u64() as f64 / 2f64.powi(64)
}

/// The ring document (`/api/ring`): every node of `addrs`, with `told`'s
/// neighbours for the node that told them and computed ones for the rest.
pub(crate) fn doc(me: Option<NodeAddr>, addrs: &[NodeAddr], told: Option<&(NodeAddr, Neighbours)>) -> Value {
    let ring = RingTruth::of_addrs(addrs.iter().copied());
    let nodes: Vec<Value> = ring
        .nodes()
        .iter()
        .map(|&(id, addr)| {
            let n = match told {
                Some((a, n)) if *a == addr => n.clone(),
                _ => Neighbours::computed(&ring, addr),
            };
            let s = |a: &NodeAddr| a.to_string();
            json!({"addr": s(&addr), "id": id.to_string(), "pos": position(id),
                "source": if n.told { "node" } else { "computed" },
                "predecessor": n.predecessor.as_ref().map(s),
                "successors": n.successors.iter().map(s).collect::<Vec<_>>(),
                "fingers": n.fingers.iter().map(|(i, a)| json!({"index": i, "node": s(a)})).collect::<Vec<_>>()})
        })
        .collect();
    json!({"me": me.map(|m| m.to_string()), "bits": ID_BITS, "nodes": nodes})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(n: u16) -> Vec<NodeAddr> {
        (0..n).map(|i| NodeAddr(format!("127.0.0.1:{}", 7000 + i).parse().unwrap())).collect()
    }

    #[test]
    fn computed_neighbours_follow_the_ids() {
        let all = addrs(12);
        let ring = RingTruth::of_addrs(all.iter().copied());
        let sorted: Vec<NodeAddr> = ring.nodes().iter().map(|(_, a)| *a).collect();
        let n = Neighbours::computed(&ring, sorted[3]);
        assert_eq!(n.predecessor, Some(sorted[2]));
        assert_eq!(n.successors, sorted[4..12].to_vec(), "the next 8 nodes clockwise");
        // Finger i is the first node at or after id + 2^i: the last one is
        // half the ring away, and every finger is a node of the ring.
        let (i, last) = *n.fingers.last().unwrap();
        assert_eq!(last, ring.owner(sorted[3].id().add_pow2(u32::from(i))).1);
        assert_eq!(n.fingers[0].1, sorted[4], "the nearest finger is the successor");
        assert!(n.fingers.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 != w[1].1));
        let alone = RingTruth::of_addrs(all[..1].iter().copied());
        let n = Neighbours::computed(&alone, all[0]);
        assert!(n.predecessor.is_none() && n.successors.is_empty() && n.fingers.is_empty());
    }

    #[test]
    fn the_document_labels_what_the_node_told() {
        let all = addrs(4);
        let me = all[1];
        let reply = ToolReply::Ring { me, predecessor: None, successors: vec![all[2]], fingers: vec![(0, me)] };
        let told = Neighbours::told(&reply).unwrap();
        assert!(told.1.fingers.is_empty(), "a finger on itself is no neighbour");
        let d = doc(Some(me), &all, Some(&told));
        let nodes = d["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 4);
        let sources: Vec<(&str, &str)> =
            nodes.iter().map(|n| (n["addr"].as_str().unwrap(), n["source"].as_str().unwrap())).collect();
        for (addr, source) in sources {
            assert_eq!(source == "node", addr == me.to_string(), "{addr} {source}");
        }
        let pos: Vec<f64> = nodes.iter().map(|n| n["pos"].as_f64().unwrap()).collect();
        assert!(pos.windows(2).all(|w| w[0] <= w[1]) && pos.iter().all(|p| (0.0..1.0).contains(p)));
    }
}
