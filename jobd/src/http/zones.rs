//! The CAN zones as the page draws them: every node's zones as boxes, each
//! side a fraction of the space, with the neighbours the node told. Unlike the
//! ring they cannot be computed from the node list (a zone depends on the
//! order of joins), so only what the nodes told is shown ([`ToolReply::Zones`]).

use p2pmp_core::can::Zone;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{NodeZones, ToolReply};
use serde_json::{Value, json};

/// What a [`ToolReply::Zones`] says: the node that answered, the dimensions,
/// and each node's zones and neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Told {
    pub(crate) me: NodeAddr,
    pub(crate) dims: usize,
    pub(crate) nodes: Vec<NodeZones>,
}

impl Told {
    /// The contents of `reply`, if it is a [`ToolReply::Zones`].
    pub(crate) fn of(reply: ToolReply) -> Option<Told> {
        let ToolReply::Zones { me, dims, nodes } = reply else { return None };
        Some(Told { me, dims: usize::from(dims), nodes })
    }
}

/// Where `c` (a coordinate, or an interval's end up to 2^32) sits, from 0 to 1.
fn fraction(c: u64) -> f64 {
    c as f64 / 2f64.powi(32)
}

/// One zone: its depth, and its lower and upper corners as fractions of the space.
fn zone(z: &Zone) -> Value {
    let (lo, hi): (Vec<f64>, Vec<f64>) = (0..z.dims())
        .map(|k| {
            let (a, b) = z.interval(k);
            (fraction(a), fraction(b))
        })
        .unzip();
    json!({"depth": z.depth(), "lo": lo, "hi": hi})
}

/// The zones document (`/api/zones`): `me` and `dims` (null before a CAN node
/// answered) and every node that told its zones, by address.
pub(crate) fn doc(told: Option<&Told>) -> Value {
    let Some(t) = told else { return json!({"me": null, "dims": null, "nodes": []}) };
    let nodes: Vec<Value> = t
        .nodes
        .iter()
        .map(|n| {
            // Zones of another space (a node that lies) are left out.
            let zones: Vec<&Zone> = n.zones.iter().filter(|z| z.dims() == t.dims).collect();
            let volume: f64 = zones.iter().map(|z| z.volume()).sum();
            json!({"addr": n.node.to_string(), "zones": zones.iter().map(|z| zone(z)).collect::<Vec<_>>(),
                "volume": volume, "neighbours": n.neighbours.iter().map(|a| a.to_string()).collect::<Vec<_>>()})
        })
        .collect();
    json!({"me": t.me.to_string(), "dims": t.dims, "nodes": nodes})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> NodeAddr {
        NodeAddr(format!("127.0.0.1:{port}").parse().unwrap())
    }

    #[test]
    fn zones_become_boxes_of_fractions_of_the_space() {
        let (left, right) = Zone::root(2).halves().unwrap();
        let (bottom, top) = right.halves().unwrap();
        let nodes = vec![
            NodeZones { node: addr(1), zones: vec![left], neighbours: vec![addr(2), addr(3)] },
            NodeZones { node: addr(2), zones: vec![bottom, Zone::root(3)], neighbours: vec![addr(1), addr(3)] },
            NodeZones { node: addr(3), zones: vec![top], neighbours: vec![addr(1), addr(2)] },
        ];
        let reply = ToolReply::Zones { me: addr(2), dims: 2, nodes };
        let d = doc(Told::of(reply).as_ref());
        assert_eq!((d["me"].as_str(), d["dims"].as_u64()), (Some("127.0.0.1:2"), Some(2)));
        let n = d["nodes"].as_array().unwrap();
        assert_eq!(n[0]["zones"][0], json!({"depth": 1, "lo": [0.0, 0.0], "hi": [0.5, 1.0]}));
        assert_eq!(n[1]["zones"].as_array().unwrap().len(), 1, "a zone of three dimensions is left out");
        assert_eq!(n[1]["zones"][0], json!({"depth": 2, "lo": [0.5, 0.0], "hi": [1.0, 0.5]}));
        assert_eq!(n[2]["zones"][0]["lo"], json!([0.5, 0.5]));
        let total: f64 = n.iter().map(|n| n["volume"].as_f64().unwrap()).sum();
        assert_eq!(total, 1.0);
        assert_eq!(n[2]["neighbours"], json!(["127.0.0.1:1", "127.0.0.1:2"]));
        assert_eq!(doc(None), json!({"me": null, "dims": null, "nodes": []}));
        assert!(Told::of(ToolReply::Values { values: vec![] }).is_none());
    }
}
