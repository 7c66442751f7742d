//! The CAN node of the node program: configuration from the flags, and the
//! `state` line.

use std::net::TcpListener;
use std::time::Duration;

use p2pmp_core::can::{CanConfig, CanNode};
use p2pmp_core::machine::NodeAddr;

use super::Args;
use super::repl;
use crate::{Driver, DriverConfig, spawn_node};

pub(super) fn run(args: &Args, listener: TcpListener, addr: NodeAddr, cfg: DriverConfig) -> anyhow::Result<()> {
    // The stabilization period paces CAN's heartbeats.
    let beat = args.stabilize();
    let config = CanConfig {
        dims: usize::from(args.dims),
        heartbeat_period: beat,
        dead_after: beat * 7 / 2,
        takeover_delay: beat * 3 / 10,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        lookup_timeout: Duration::from_millis(args.lookup_timeout_ms),
        join_backoff_min: beat.min(Duration::from_secs(1)),
        join_backoff_max: (beat * 10).min(Duration::from_secs(30)),
        ..CanConfig::default()
    };
    let bootstrap = args.bootstrap.clone();
    let seed = args.seed.unwrap_or(u64::from(addr.0.port()));
    let handle = spawn_node(args.runtime, listener, cfg, move |now| CanNode::new(config, addr, bootstrap, now, seed))?;
    repl::serve(handle, state_line)
}

/// `state` answers with `state addr=A id=HEX joined=B left=B zones=Z1;Z2 nbrs=A,B,.. stored=N conns=N`.
fn state_line(d: &Driver<CanNode>) -> String {
    let n = d.machine();
    let zones: Vec<String> = n.zones().iter().map(|z| format!("{z:?}").replace(' ', "")).collect();
    let nbrs: Vec<String> = n.neighbours().iter().map(|i| i.peer.addr.to_string()).collect();
    format!(
        "state addr={} id={} joined={} left={} zones={} nbrs={} stored={} conns={}",
        n.me().addr,
        n.id(),
        n.is_joined(),
        n.has_left(),
        if zones.is_empty() { "-".to_string() } else { zones.join(";") },
        if nbrs.is_empty() { "-".to_string() } else { nbrs.join(",") },
        n.stored_len(),
        d.conn_count(),
    )
}
