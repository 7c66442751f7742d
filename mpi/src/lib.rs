//! p2pmp-mpi: the MPI library p2pmp applications link.
//!
//! Will hold the Rust API (`init`, point-to-point, collectives) over the matching
//! engine of `p2pmp-core`, its mio data path, the C ABI (`libp2pmpi`, `mpi.h`) and
//! the checkpoint API.
