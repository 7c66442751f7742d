//! p2pmp-jobd: the node daemon `jobd` and the user tool `p2pjob`.
//!
//! Everything here is I/O around [`p2pmp_core::node::DaemonNode`]: the protocol
//! logic (overlay, placement, staging, the local node protocol) lives in core.
//!
//! - [`config`]: the daemon's TOML configuration and automatic resource detection.
//! - [`daemon`]: runs one daemon as one event loop: the node (its peers and the
//!   local control connections, served by the adapters) and the shell.
//! - `shell`: the daemon's own side of that loop: processes (`procs`) and the
//!   file worker (`worker`, a thread of its own, so the loop never blocks).
//! - [`sandbox`]: each job's own user, limits, cgroup and disk quota on an
//!   executor ([`Limits`] are configured).
//! - [`allow`]: whose jobs the daemon runs and who may act on them (allow-list, admins).
//! - [`client`]: clients of the control socket: blocking (`p2pjob`) and on tokio
//!   (the status page).
//! - [`embedded`]: an embedded network of daemons on loopback (`--local N`, `demo`).
//! - [`keys`]: key files (`p2pjob keygen`, the key requests are signed with).
//! - [`json`]: the JSON shapes of jobs and nodes (`p2pjob --json`, the status page).
//! - [`node_key`]: the daemon's static key for its encrypted links (`node-PORT.key`).
//! - [`http`]: the status page (`jobd --http ADDR`), a client of the control socket.

pub mod allow;
pub mod client;
pub mod config;
pub mod criu;
pub mod daemon;
pub mod embedded;
mod files;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod http;
pub mod json;
pub mod keys;
mod limits;
pub mod node_key;
mod procs;
pub mod sandbox;
mod shell;
mod worker;

pub use client::Client;
pub use config::{Config, Overlay};
pub use daemon::Daemon;
pub use procs::interpreter;
pub use sandbox::Limits;
