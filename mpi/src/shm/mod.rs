//! Shared memory between ranks of one host: byte rings in a sealed memfd,
//! eventfd doorbells, and the Unix-socket hand-over of both (see `segment`,
//! `ring`). The transport runs its frame codec over a ring as over a socket.

pub(crate) mod ring;
pub(crate) mod segment;
