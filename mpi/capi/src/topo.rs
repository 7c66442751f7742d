//! Topologies (MPI-1 §7): Cartesian and graph.

/// The topology a communicator carries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(dead_code)] // Made by the topology calls.
pub(crate) enum Topo {
    Cart { dims: Vec<i32>, periods: Vec<bool> },
    Graph { index: Vec<i32>, edges: Vec<i32> },
}
