/* MPI_ANY_SOURCE and MPI_ANY_TAG receives, MPI_Waitany, MPI_Waitall, MPI_Test,
 * MPI_Testall, MPI_Probe and MPI_Iprobe: every rank sends `msgs` numbered
 * messages to rank 0, which takes them in whatever order they come and checks
 * that each arrived once, in order per sender. Usage: anysource [msgs]. */
#include <stdlib.h>
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    int msgs = argc > 1 ? atoi(argv[1]) : 50;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* 1. Blocking ANY_SOURCE / ANY_TAG receives: per-sender order holds. */
    if (rank == 0) {
        int *next = calloc(size, sizeof(int));
        for (int i = 0; i < msgs * (size - 1); i++) {
            int v[2];
            MPI_Status st;
            MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int s = st.MPI_SOURCE;
            CHECK(s >= 1 && s < size && v[0] == s, "message from %d claims %d", s, v[0]);
            if (s >= 1 && s < size) {
                CHECK(v[1] == next[s] && st.MPI_TAG == next[s] % 7, "from %d: got #%d tag %d, want #%d", s, v[1],
                      st.MPI_TAG, next[s]);
                next[s]++;
            }
        }
        for (int s = 1; s < size; s++) CHECK(next[s] == msgs, "from %d: %d messages", s, next[s]);
        free(next);
    } else {
        for (int i = 0; i < msgs; i++) {
            int v[2] = {rank, i};
            MPI_Send(v, 2, MPI_INT, 0, i % 7, MPI_COMM_WORLD);
        }
    }

    /* Later messages must not meet the wildcard receives above. */
    MPI_Barrier(MPI_COMM_WORLD);

    /* 2. Waitany over one receive per sender, posted with explicit sources. */
    if (rank == 0) {
        MPI_Request *req = malloc(sizeof(MPI_Request) * size);
        long *val = calloc(size, sizeof(long));
        req[0] = MPI_REQUEST_NULL;
        for (int s = 1; s < size; s++) MPI_Irecv(&val[s], 1, MPI_LONG, s, 42, MPI_COMM_WORLD, &req[s]);
        int seen = 0;
        for (;;) {
            int idx;
            MPI_Status st;
            MPI_Waitany(size, req, &idx, &st);
            if (idx == MPI_UNDEFINED) break;
            seen++;
            CHECK(req[idx] == MPI_REQUEST_NULL, "Waitany leaves request %d", idx);
            CHECK(st.MPI_SOURCE == idx && val[idx] == 100L * idx, "Waitany index %d: source %d value %ld", idx,
                  st.MPI_SOURCE, val[idx]);
        }
        CHECK(seen == size - 1, "Waitany finished %d of %d", seen, size - 1);
        free(req);
        free(val);
    } else {
        long v = 100L * rank;
        MPI_Request r;
        MPI_Isend(&v, 1, MPI_LONG, 0, 42, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        CHECK(r == MPI_REQUEST_NULL, "Wait leaves the request");
    }

    /* 3. Probe then receive exactly the probed size; Iprobe polls until there. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[9];
    for (int i = 0; i < 9; i++) out[i] = rank * 10 + i;
    int len = 1 + rank % 9;
    MPI_Request sr;
    MPI_Isend(out, len, MPI_INT, next, 5, MPI_COMM_WORLD, &sr);
    MPI_Status pst;
    int flag = 0;
    while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &flag, &pst);
    MPI_Status pst2;
    MPI_Probe(prev, MPI_ANY_TAG, MPI_COMM_WORLD, &pst2);
    int count;
    MPI_Get_count(&pst, MPI_INT, &count);
    CHECK(pst.MPI_SOURCE == prev && pst.MPI_TAG == 5 && count == 1 + prev % 9, "probe: %d %d %d", pst.MPI_SOURCE,
          pst.MPI_TAG, count);
    CHECK(pst2.MPI_SOURCE == prev && pst2.MPI_TAG == 5, "probe 2: %d %d", pst2.MPI_SOURCE, pst2.MPI_TAG);
    int *in = malloc(sizeof(int) * (count > 0 ? count : 1));
    MPI_Recv(in, count, MPI_INT, pst.MPI_SOURCE, pst.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(in[count - 1] == prev * 10 + count - 1, "probed message content %d", in[count - 1]);
    free(in);
    MPI_Wait(&sr, MPI_STATUS_IGNORE);

    /* 4. Test and Testall: poll a ring exchange to completion. */
    long a = rank, b = -1;
    MPI_Request rq[2];
    MPI_Irecv(&b, 1, MPI_LONG, prev, 6, MPI_COMM_WORLD, &rq[0]);
    MPI_Isend(&a, 1, MPI_LONG, next, 6, MPI_COMM_WORLD, &rq[1]);
    int all = 0, polls = 0;
    MPI_Status sts[2];
    while (!all) {
        MPI_Testall(2, rq, &all, sts);
        polls++;
    }
    CHECK(b == prev && rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL, "Testall: %ld", b);
    CHECK(sts[0].MPI_SOURCE == prev && sts[0].MPI_TAG == 6, "Testall status %d %d", sts[0].MPI_SOURCE,
          sts[0].MPI_TAG);
    MPI_Irecv(&b, 1, MPI_LONG, prev, 8, MPI_COMM_WORLD, &rq[0]);
    MPI_Send(&a, 1, MPI_LONG, next, 8, MPI_COMM_WORLD);
    flag = 0;
    MPI_Status tst;
    while (!flag) MPI_Test(&rq[0], &flag, &tst);
    CHECK(rq[0] == MPI_REQUEST_NULL && tst.MPI_SOURCE == prev && b == prev, "Test: %d %ld", tst.MPI_SOURCE, b);
    /* A null request tests complete with an empty status. */
    MPI_Request nul = MPI_REQUEST_NULL;
    MPI_Test(&nul, &flag, &tst);
    CHECK(flag == 1 && tst.MPI_SOURCE == MPI_ANY_SOURCE && tst.MPI_TAG == MPI_ANY_TAG, "null request");

    int code = report("anysource");
    MPI_Finalize();
    return code;
}
