/* MPIp2p.h: the original P2P-MPI system's name for mpi.h; programs written
 * for it build unchanged. */
#include "mpi.h"
