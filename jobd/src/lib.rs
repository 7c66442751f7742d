//! p2pmp-jobd: the node daemon `jobd` and the user tool `p2pjob`.
//!
//! Everything here is I/O around [`p2pmp_core::node::DaemonNode`]: the protocol
//! logic (overlay, placement, staging, the local node protocol) lives in core.
//!
//! - [`config`]: the daemon's TOML configuration and automatic resource detection.
//! - [`daemon`]: runs one daemon: the node on the tokio adapter, the control
//!   socket, processes, files.
//! - [`client`]: the blocking control-socket client `p2pjob` uses.
//! - [`local`]: an embedded network of daemons on loopback (`--local N`, `demo`).
//! - [`json`]: the JSON shapes of jobs and nodes (`p2pjob --json`, the status page).
//! - [`http`]: the status page (`jobd --http ADDR`), a client of the control socket.

pub mod client;
pub mod config;
pub mod daemon;
mod files;
pub mod http;
pub mod json;
pub mod local;
mod procs;

pub use client::Client;
pub use config::{Config, Overlay};
pub use daemon::Daemon;
