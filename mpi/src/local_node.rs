//! A daemon node inside this process: the one `p2pmp-launch` runs for the
//! ranks it starts, and the one a program started alone (no launcher, no
//! `P2PMP_*` variables) runs for itself as a world of one rank, as MPI's
//! singleton `MPI_Init` does.
//!
//! It is the same [`DaemonNode`] as `jobd`'s, alone or joined through a
//! bootstrap node, its local node protocol served by the adapters on
//! 127.0.0.1. It runs no jobs: whoever started it starts the ranks.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use p2pmp_adapters::local::DaemonCodec;
use p2pmp_adapters::{DriverConfig, NodeHandle, spawn_daemon};
use p2pmp_core::job::Resources;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::{DaemonConfig, DaemonNode, NodeEvent};
use p2pmp_core::overlay::OverlayEvent;

/// A node of this process; it stops when dropped.
pub type LocalNode = NodeHandle<DaemonNode>;

/// 16 random bytes for a new job's id: std's per-process random hash keys,
/// the time and the pid.
pub fn fresh_job_id() -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for i in 0..2u64 {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(i);
        h.write_u32(std::process::id());
        h.write_u128(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        out.extend_from_slice(&h.finish().to_be_bytes());
    }
    out
}

/// Starts a node: overlay on `listen`, local node protocol on a loopback
/// port (returned, for `P2PMP_NODE`); returns once it is part of a network
/// (a new one without `bootstrap`).
pub fn start(listen: &str, bootstrap: Vec<NodeAddr>) -> anyhow::Result<(LocalNode, NodeAddr)> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding the overlay address {listen}"))?;
    let control = TcpListener::bind("127.0.0.1:0").context("binding the control address")?;
    let (addr, node) = (NodeAddr(listener.local_addr()?), NodeAddr(control.local_addr()?));
    let seed = u64::from(addr.0.port()) ^ u64::from(std::process::id()) << 16;
    // One slot, never offered: the node runs no jobs.
    let res = Resources {
        os: std::env::consts::OS.into(),
        arch: std::env::consts::ARCH.into(),
        slots: 1,
        ..Resources::default()
    };
    let mut cfg = DaemonConfig::new(res, node.to_string(), std::env::temp_dir().to_string_lossy(), seed);
    cfg.bootstrap = bootstrap;
    let (joined_tx, joined) = std::sync::mpsc::channel();
    let handle = spawn_daemon(
        listener,
        control,
        DaemonCodec::new(node),
        DriverConfig::default(),
        move |now| DaemonNode::new(cfg, addr, now),
        move |events, _remote| async move {
            while let Ok(ev) = events.recv().await {
                if ev == NodeEvent::Overlay(OverlayEvent::Joined) {
                    let _ = joined_tx.send(());
                }
            }
        },
    )
    .context("starting the node")?;
    let is_joined = handle.inspect(|d| d.machine().overlay_node().is_joined()).map_err(|e| anyhow::anyhow!("{e}"))?;
    if !is_joined {
        joined.recv_timeout(Duration::from_secs(30)).context("the node did not join a network in time")?;
    }
    Ok((handle, node))
}
