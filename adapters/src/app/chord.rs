//! The Chord node of the node program: configuration from the flags, and the
//! `state` line.

use std::net::TcpListener;
use std::time::Duration;

use p2pmp_core::chord::{ChordConfig, ChordNode};
use p2pmp_core::machine::NodeAddr;

use tracing::info;

use super::Args;
use super::repl;
use crate::{Driver, DriverConfig, spawn_node};

pub(super) fn run(args: &Args, listener: TcpListener, addr: NodeAddr, cfg: DriverConfig) -> anyhow::Result<()> {
    let stab = args.stabilize();
    let config = ChordConfig {
        stabilize_period: stab,
        fix_fingers_period: stab,
        check_predecessor_period: stab * 2,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        lookup_timeout: Duration::from_millis(args.lookup_timeout_ms),
        join_backoff_min: stab.min(Duration::from_secs(1)),
        join_backoff_max: (stab * 10).min(Duration::from_secs(30)),
        ..ChordConfig::default()
    };
    let bootstrap = args.bootstrap.clone();
    let seed = args.seed.unwrap_or(u64::from(addr.0.port()));
    let handle =
        spawn_node(args.runtime, listener, cfg, move |now| ChordNode::new(config, addr, bootstrap, now, seed))?;
    let remote = handle.remote();
    std::thread::spawn(move || {
        // Logs neighbour changes as the node sees them, at the stabilization pace.
        let mut last = None;
        while let Ok(seen) = remote.inspect(|d| {
            let n = d.machine();
            (n.predecessor().map(|p| p.addr), n.successor().addr)
        }) {
            if last != Some(seen) {
                let pred = seen.0.map_or_else(|| "-".to_string(), |p| p.to_string());
                info!(%pred, succ = %seen.1, "neighbours");
                last = Some(seen);
            }
            std::thread::sleep(stab);
        }
    });
    repl::serve(handle, state_line)
}

/// `state` answers with `state addr=A id=HEX joined=B pred=ADDR|- succ=A,B,.. stored=N fingers=N conns=N`.
fn state_line(d: &Driver<ChordNode>) -> String {
    let n = d.machine();
    let pred = n.predecessor().map_or_else(|| "-".to_string(), |p| p.addr.to_string());
    let succ: Vec<String> = n.successor_list().iter().map(|p| p.addr.to_string()).collect();
    format!(
        "state addr={} id={} joined={} left={} pred={} succ={} stored={} fingers={} conns={}",
        n.me().addr,
        n.id(),
        n.is_joined(),
        n.has_left(),
        pred,
        if succ.is_empty() { "-".to_string() } else { succ.join(",") },
        n.stored_len(),
        n.fingers().len(),
        d.conn_count(),
    )
}
