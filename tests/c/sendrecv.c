/* MPI_Sendrecv shifts: every rank sends to rank+k and receives from rank-k,
 * for every k (periodic), then a non-periodic shift with MPI_PROC_NULL at the
 * ends; on MPI_COMM_WORLD and on a duplicate of it. */
#include "check.h"

static void shifts(MPI_Comm comm, const char *name) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int k = 1; k <= size; k++) {
        int out[3] = {rank, k, rank * 1000 + k}, in[3] = {-1, -1, -1};
        int to = (rank + k) % size, from = (rank + size - k) % size;
        MPI_Status st;
        MPI_Sendrecv(out, 3, MPI_INT, to, k, in, 3, MPI_INT, from, k, comm, &st);
        CHECK(in[0] == from && in[1] == k && in[2] == from * 1000 + k, "%s shift %d: got %d %d %d", name, k,
              in[0], in[1], in[2]);
        CHECK(st.MPI_SOURCE == from && st.MPI_TAG == k, "%s shift %d: status %d %d", name, k, st.MPI_SOURCE,
              st.MPI_TAG);
    }
    /* Non-periodic: the ends talk to MPI_PROC_NULL, which moves nothing. */
    double out = rank + 0.5, in = -1.0;
    int to = rank + 1 < size ? rank + 1 : MPI_PROC_NULL, from = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    MPI_Status st;
    MPI_Sendrecv(&out, 1, MPI_DOUBLE, to, 7, &in, 1, MPI_DOUBLE, from, 7, comm, &st);
    if (from == MPI_PROC_NULL) {
        int count;
        MPI_Get_count(&st, MPI_DOUBLE, &count);
        CHECK(in == -1.0 && st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0,
              "%s: receive from MPI_PROC_NULL: %g %d %d %d", name, in, st.MPI_SOURCE, st.MPI_TAG, count);
    } else {
        CHECK(in == from + 0.5, "%s: non-periodic shift got %g", name, in);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    shifts(MPI_COMM_WORLD, "world");
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    shifts(dup, "dup");
    shifts(MPI_COMM_SELF, "self");
    MPI_Comm_free(&dup);
    CHECK(dup == MPI_COMM_NULL, "MPI_Comm_free leaves %d", dup);
    int code = report("sendrecv");
    MPI_Finalize();
    return code;
}
