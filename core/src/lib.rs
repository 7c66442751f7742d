//! p2pmp-core: every protocol of p2pmp as a pure, sans-IO state machine.
//!
//! Nothing in this crate reads a clock, opens a socket, spawns a thread or a task,
//! or touches a file. Time (`now: Instant`) and randomness (a seed) come in from
//! the caller; messages and wake-ups go out through `poll_*` methods. The adapters
//! crate drives these machines over real sockets, and [`sim`] drives them in a
//! deterministic discrete-event simulation.
//!
//! - [`auth`]: Ed25519 identities, signed tool requests and jobs, the replay
//!   guard, and a node's allow-list and admins.
//! - [`can`]: the CAN overlay node.
//! - [`chord`]: the Chord overlay node.
//! - [`ckpt`]: checkpoint files (one rank's protected regions and library
//!   state), encoded and checked.
//! - [`guard`]: policy against hostile peers: connection caps per source, token
//!   buckets for frames and bytes per second, bans of sources that misbehaved.
//! - [`id`]: 160-bit SHA-1 identifiers and ring arithmetic.
//! - [`job`]: job files, requirements, the job protocol and its submitter and executor machines.
//! - [`wire`]: the message envelope, postcard encoding, the length-prefixed frame
//!   codec, and the client side of a request/reply exchange.
//! - [`local`]: the local node protocol (a process and its node) and the rank hello.
//! - [`machine`]: the one shape every protocol machine has.
//! - [`overlay`]: commands and events both overlays share.
//! - [`secure`]: Noise channels (handshake, encrypted records) and static keys
//!   for authenticated, encrypted links; pure compute, seeded by the caller.
//! - [`node`]: the daemon node, its overlay node (Chord or CAN) plus the job
//!   machines plus the local node protocol, as one machine.
//! - [`mpi`]: the per-process MPI matching and eager/rendezvous engine, and the
//!   link machine of a rank's connections (resolve, connect, back-off, give-up).
//! - [`sim`]: the deterministic discrete-event simulator.
//! - [`time`]: the enum-indexed timer table machines keep their wake-ups in, and
//!   the retry back-off.

pub mod auth;
pub mod can;
pub mod chord;
pub mod ckpt;
pub mod guard;
pub mod id;
pub mod job;
pub mod local;
pub mod machine;
pub mod mpi;
pub mod node;
pub mod overlay;
pub mod secure;
pub mod sim;
pub mod time;
pub mod wire;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
