//! CAN tests: the geometry, the wire format, and whole networks in `core::sim`.

mod sim;
mod wire;
mod zone;
