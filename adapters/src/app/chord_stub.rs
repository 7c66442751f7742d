//! Placeholder until the Chord node lands on main.
use std::net::TcpListener;

use p2pmp_core::machine::NodeAddr;

use super::Args;
use crate::DriverConfig;

pub(super) fn run(_: &Args, _: TcpListener, _: NodeAddr, _: DriverConfig) -> anyhow::Result<()> {
    anyhow::bail!("the Chord node is not merged yet")
}
