//! The daemon node on the simulator's terms: driven by hand, no sockets.
