//! The trivial MPI program of the start-up benchmark: init, barrier, finalize;
//! rank 0 prints `hello <size>`.

fn main() -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    w.barrier()?;
    if w.rank() == 0 {
        println!("hello {}", w.size());
    }
    w.finalize()
}
