//! The node program behind `examples/node.rs` (and the integration tests' binary):
//! starts one overlay node on the chosen runtime, logs its state changes, and
//! answers line commands from stdin with one parseable line each (see [`repl`]).

use std::net::TcpListener;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use p2pmp_core::machine::NodeAddr;
use tracing::info;

use crate::{DriverConfig, RuntimeKind};

mod can;
mod chord;
pub mod repl;

/// Which overlay the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverlayKind {
    Chord,
    Can,
}

/// Command-line arguments of the node program.
#[derive(Debug, Clone, Parser)]
#[command(name = "node", about = "One p2pmp overlay node over TCP, driven by line commands on stdin")]
pub struct Args {
    /// Runtime that drives the node: tokio, smol or mio.
    #[arg(long, default_value = "tokio", value_parser = parse_runtime)]
    pub runtime: RuntimeKind,
    /// Overlay to run.
    #[arg(long, value_enum, default_value = "chord")]
    pub overlay: OverlayKind,
    /// Dimensions of the CAN torus (1 to 8); every node of a network must agree.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub dims: u8,
    /// Address to listen on (and advertise); port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Contacts to join through; none creates a new network.
    #[arg(long, num_args = 0..)]
    pub bootstrap: Vec<NodeAddr>,
    /// Nodes of other networks are refused.
    #[arg(long, default_value_t = 1)]
    pub network_id: u64,
    /// Seed of the node's random choices (default: from the port).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stabilization period in milliseconds (fix-fingers runs at the same pace,
    /// check-predecessor at twice the period; CAN's heartbeats at this period).
    #[arg(long, default_value_t = 1000)]
    pub stabilize_ms: u64,
    /// How long to wait for any one reply, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub request_timeout_ms: u64,
    /// How long a lookup or query may take in all, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    pub lookup_timeout_ms: u64,
    /// Log level on stderr: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    pub log: tracing::Level,
}

fn parse_runtime(s: &str) -> Result<RuntimeKind, String> {
    s.parse()
}

impl Args {
    pub(crate) fn stabilize(&self) -> Duration {
        Duration::from_millis(self.stabilize_ms.max(1))
    }
}

/// Parses the command line and runs the node until stdin ends, `quit` or `leave`;
/// an error is printed on stderr and the exit code is 1.
pub fn main() -> std::process::ExitCode {
    match try_main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn try_main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(args.log)
        .with_target(false)
        .init();
    run(args)
}

/// Runs a node with `args` (see [`main`]).
pub fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&args.listen).with_context(|| format!("binding {}", args.listen))?;
    let addr = NodeAddr(listener.local_addr()?);
    // Peers running the other overlay (or another CAN shape) are refused at the hello.
    let kind = match args.overlay {
        OverlayKind::Chord => p2pmp_core::overlay::OverlayKind::Chord,
        OverlayKind::Can => p2pmp_core::overlay::OverlayKind::Can { dims: args.dims },
    };
    let cfg = DriverConfig { network_id: args.network_id, overlay: Some(kind), ..DriverConfig::default() };
    info!(%addr, runtime = %args.runtime, overlay = %kind, "starting");
    match args.overlay {
        OverlayKind::Chord => chord::run(&args, listener, addr, cfg),
        OverlayKind::Can => can::run(&args, listener, addr, cfg),
    }
}
