//! p2pmp-tests: cross-crate integration tests.
//!
//! Will hold tests that start real processes on loopback, property tests of
//! protocol invariants across crates, and fault injection.
