//! An embedded network of daemons on loopback ephemeral ports, in this process:
//! `p2pjob --local N` and `p2pjob demo`. Stopping it stops every daemon and
//! removes its work directory.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use p2pmp_core::node::control::{ToolReply, ToolRequest};

use crate::client::Client;
use crate::config::Config;
use crate::daemon::Daemon;

/// N daemons on 127.0.0.1.
#[derive(Debug)]
pub struct EmbeddedNet {
    daemons: Vec<Daemon>,
    dir: PathBuf,
}

impl EmbeddedNet {
    /// Starts `n` daemons with `slots` slots each; the first creates the network,
    /// the others join through it.
    pub fn start(n: usize, slots: u32) -> anyhow::Result<EmbeddedNet> {
        Self::start_with(n, slots, |_| {})
    }

    /// As [`EmbeddedNet::start`], with each daemon's configuration adjusted by `tweak`.
    pub fn start_with(n: usize, slots: u32, tweak: impl Fn(&mut Config)) -> anyhow::Result<EmbeddedNet> {
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("p2pmp-local-{}-{nonce:x}", std::process::id()));
        let mut net = EmbeddedNet { daemons: Vec::new(), dir: dir.clone() };
        for i in 0..n.max(1) {
            let mut cfg = Config {
                listen: "127.0.0.1:0".parse()?,
                control: "127.0.0.1:0".parse()?,
                bootstrap: net.daemons.first().map(|d: &Daemon| vec![d.overlay_addr()]).unwrap_or_default(),
                work_dir: dir.clone(),
                slots: Some(slots),
                tags: vec!["local".into()],
                stabilize_ms: 200,
                ..Config::default()
            };
            tweak(&mut cfg);
            let d = Daemon::start(&cfg)?;
            net.daemons.push(d);
            if i == 0 {
                // The first node must stand before others join through it.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(net)
    }

    /// The work directory every daemon of this network uses (removed on stop).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The first daemon's control address.
    pub fn control(&self) -> SocketAddr {
        self.daemons[0].control_addr()
    }

    /// The first daemon's status page, when it serves one.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.daemons.first().and_then(Daemon::http_addr)
    }

    /// Every daemon's control address.
    pub fn controls(&self) -> Vec<SocketAddr> {
        self.daemons.iter().map(Daemon::control_addr).collect()
    }

    /// Every daemon's overlay address.
    pub fn overlay_addrs(&self) -> Vec<SocketAddr> {
        self.daemons.iter().map(Daemon::overlay_addr).collect()
    }

    /// How many nodes the overlay lists right now (asked of the first daemon).
    pub fn nodes_seen(&self) -> usize {
        let listed =
            Client::connect(self.control()).and_then(|mut c| c.call(ToolRequest::Nodes, Duration::from_secs(5))).ok();
        match listed {
            Some(ToolReply::Nodes { nodes }) => nodes.len(),
            _ => 0,
        }
    }

    /// Waits until every node is listed by the overlay; calls `progress(seen)` on changes.
    pub fn wait_formed(&self, timeout: Duration, mut progress: impl FnMut(usize)) -> bool {
        let deadline = Instant::now() + timeout;
        let mut last = usize::MAX;
        while Instant::now() < deadline {
            let seen = self.nodes_seen();
            if seen != last {
                progress(seen);
                last = seen;
            }
            if seen >= self.daemons.len() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stops every daemon and removes the work directory.
    pub fn stop(self) {}
}

impl Drop for EmbeddedNet {
    fn drop(&mut self) {
        // Stop them all at once: each leaves gracefully in its own thread.
        let daemons = std::mem::take(&mut self.daemons);
        let threads: Vec<_> = daemons.into_iter().map(|d| std::thread::spawn(move || d.stop())).collect();
        for t in threads {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
