//! p2pmp-adapters: drives the sans-IO machines of `p2pmp-core` over real TCP.
//!
//! - [`Driver`] is the synchronous pump between one machine and its connections,
//!   written once and tested without sockets: lazy connects, one connection per
//!   peer, the Noise handshake and encrypted records (`DriverConfig::noise`),
//!   hellos bound to the peer's key, framing, bounded send queues, reconnect
//!   back-off, and the mapping of failures to `handle_send_failed`.
//! - Shells only wait, move bytes and report `now`: `runtime` (features `tokio`
//!   and `smol`, one async loop over the small `AsyncRuntime` trait) and
//!   `mio_loop` (feature `mio`, a readiness poll loop).
//! - `local` serves a node's local control connections (ranks and tools of its
//!   own host) beside its peers: `LocalConns` with the machine's `LocalCodec`.
//! - `spawn` starts any machine on a chosen runtime in its own thread and hands
//!   back a `NodeHandle` for commands, events and inspection; `spawn_daemon`
//!   runs a daemon node, its local connections and the application's own event
//!   loop as one event loop on one tokio thread.
//! - `app` (feature `app`, on by default with all three shells) is the node
//!   program: `cargo run -p p2pmp-adapters --example node -- --help`.
//! - `testing` (feature `testing`) is a ping/pong machine for tests and benches.
//! - `fuzzing` (feature `fuzzing`) is the fuzz logic of the local control
//!   protocol, for the cargo-fuzz targets under `fuzz/`.

#[cfg(feature = "app")]
pub mod app;
mod driver;
pub mod local;
mod peers;

pub use driver::{Driver, DriverConfig, DriverStats, IoRequest, os_seed, random_key};
pub use peers::ConnId;

#[cfg(any(feature = "tokio", feature = "smol", feature = "mio"))]
pub mod spawn;
#[cfg(feature = "tokio")]
pub use spawn::spawn_daemon;
#[cfg(any(feature = "tokio", feature = "smol", feature = "mio"))]
pub use spawn::{NodeHandle, Remote, RuntimeKind, spawn_node};

#[cfg(any(feature = "tokio", feature = "smol"))]
pub mod runtime;

#[cfg(feature = "mio")]
mod mio_loop;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
