//! p2pmp-adapters: drives the sans-IO machines of `p2pmp-core` over real TCP.
//!
//! Will hold one synchronous `Driver` that owns a machine, its peer connections and
//! frame codecs, written once, and thin shells for tokio, smol and a raw mio loop
//! behind the `tokio`, `smol` and `mio` features.
