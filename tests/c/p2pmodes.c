/* Point to point beyond the basics: MPI_Bsend / MPI_Ibsend with
 * MPI_Buffer_attach / _detach, MPI_Rsend / MPI_Irsend, persistent requests
 * (MPI_Send_init, _Bsend_init, _Ssend_init, _Rsend_init, _Recv_init,
 * MPI_Start, MPI_Startall), MPI_Request_free, MPI_Cancel and
 * MPI_Test_cancelled, MPI_Waitsome, MPI_Testsome, MPI_Testany,
 * MPI_Sendrecv_replace, MPI_PROC_NULL. Runs on any number of ranks. */
#include <stdlib.h>
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, flag, idx, n;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* buffered sends: room for two messages of 10 ints */
    int bsize = 2 * (10 * sizeof(int) + MPI_BSEND_OVERHEAD);
    char *bbuf = malloc(bsize);
    MPI_Buffer_attach(bbuf, bsize);
    int out[10], in[10], in2[10];
    for (int i = 0; i < 10; i++) out[i] = rank * 10 + i;
    MPI_Request r;
    MPI_Bsend(out, 10, MPI_INT, next, 1, MPI_COMM_WORLD);
    MPI_Ibsend(out, 10, MPI_INT, next, 2, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Recv(in, 10, MPI_INT, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(in2, 10, MPI_INT, prev, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(in[9] == prev * 10 + 9 && in2[0] == prev * 10, "buffered messages arrived");
    void *addr;
    int dsize;
    MPI_Buffer_detach(&addr, &dsize);
    CHECK(addr == bbuf && dsize == bsize, "detach gives the buffer back");
    free(bbuf);

    /* ready sends: the receive is posted before a barrier */
    MPI_Irecv(in, 10, MPI_INT, prev, 3, MPI_COMM_WORLD, &r);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Rsend(out, 10, MPI_INT, next, 3, MPI_COMM_WORLD);
    MPI_Wait(&r, &st);
    CHECK(in[1] == prev * 10 + 1 && st.MPI_SOURCE == prev, "ready send");

    /* persistent requests, started three times */
    MPI_Request pr[5];
    int v[4] = {0}, got[4];
    MPI_Send_init(&v[0], 1, MPI_INT, next, 10, MPI_COMM_WORLD, &pr[0]);
    MPI_Ssend_init(&v[1], 1, MPI_INT, next, 11, MPI_COMM_WORLD, &pr[1]);
    MPI_Rsend_init(&v[2], 1, MPI_INT, next, 12, MPI_COMM_WORLD, &pr[2]);
    MPI_Recv_init(&got[0], 1, MPI_INT, prev, 10, MPI_COMM_WORLD, &pr[3]);
    MPI_Recv_init(&got[1], 2, MPI_INT, prev, 11, MPI_COMM_WORLD, &pr[4]);
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        MPI_Request rr;
        MPI_Irecv(&got[2], 1, MPI_INT, prev, 12, MPI_COMM_WORLD, &rr);
        MPI_Barrier(MPI_COMM_WORLD);
        v[0] = v[1] = v[2] = 100 * k + rank;
        MPI_Startall(2, &pr[3]);
        MPI_Startall(3, pr);
        MPI_Waitall(5, pr, MPI_STATUSES_IGNORE);
        MPI_Wait(&rr, MPI_STATUS_IGNORE);
        ok &= got[0] == 100 * k + prev && got[1] == 100 * k + prev && got[2] == 100 * k + prev;
    }
    CHECK(ok, "persistent requests repeated");
    CHECK(pr[0] != MPI_REQUEST_NULL, "a completed persistent request stays");
    MPI_Wait(&pr[0], &st);
    CHECK(st.MPI_TAG == MPI_ANY_TAG, "waiting on an inactive request returns at once");
    for (int k = 0; k < 5; k++) MPI_Request_free(&pr[k]);
    CHECK(pr[4] == MPI_REQUEST_NULL, "freed");
    MPI_Request bp;
    char *b2 = malloc(100 + MPI_BSEND_OVERHEAD);
    MPI_Buffer_attach(b2, 100 + MPI_BSEND_OVERHEAD);
    MPI_Bsend_init(out, 1, MPI_INT, rank, 13, MPI_COMM_WORLD, &bp);
    MPI_Start(&bp);
    MPI_Wait(&bp, MPI_STATUS_IGNORE);
    MPI_Recv(in, 1, MPI_INT, rank, 13, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(in[0] == out[0], "persistent buffered send");
    MPI_Request_free(&bp);
    MPI_Buffer_detach(&addr, &dsize);
    free(b2);

    /* cancel: a receive nothing will match */
    MPI_Irecv(in, 1, MPI_INT, MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag, "receive cancelled");
    /* a send that is received is not cancelled */
    MPI_Isend(out, 1, MPI_INT, rank, 20, MPI_COMM_WORLD, &r);
    MPI_Cancel(&r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    if (!flag) MPI_Recv(in, 1, MPI_INT, rank, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(flag || in[0] == out[0], "a send either cancelled or delivered");

    /* Request_free on an active send: it still arrives */
    MPI_Isend(out, 2, MPI_INT, next, 21, MPI_COMM_WORLD, &r);
    MPI_Request_free(&r);
    MPI_Recv(in, 2, MPI_INT, prev, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(in[1] == prev * 10 + 1, "a freed send still delivers");

    /* waitsome / testsome / testany */
    MPI_Request q[3];
    int a[3];
    for (int k = 0; k < 3; k++) MPI_Irecv(&a[k], 1, MPI_INT, prev, 30 + k, MPI_COMM_WORLD, &q[k]);
    int idxs[3], done = 0, loops = 0;
    MPI_Testsome(3, q, &n, idxs, MPI_STATUSES_IGNORE);
    CHECK(n == 0 || size == 1 || n >= 0, "testsome before sending");
    done += n == MPI_UNDEFINED ? 0 : n;
    for (int k = 0; k < 3; k++) MPI_Send(&out[k], 1, MPI_INT, next, 30 + k, MPI_COMM_WORLD);
    while (done < 3 && loops++ < 100) {
        MPI_Waitsome(3, q, &n, idxs, MPI_STATUSES_IGNORE);
        CHECK(n >= 1, "waitsome returns something (%d)", n);
        done += n;
    }
    CHECK(done == 3 && a[2] == prev * 10 + 2, "waitsome took all three");
    MPI_Waitsome(3, q, &n, idxs, MPI_STATUSES_IGNORE);
    CHECK(n == MPI_UNDEFINED, "nothing active: MPI_UNDEFINED");
    MPI_Testany(3, q, &idx, &flag, MPI_STATUS_IGNORE);
    CHECK(flag && idx == MPI_UNDEFINED, "testany with nothing active");
    MPI_Irecv(&a[0], 1, MPI_INT, rank, 40, MPI_COMM_WORLD, &q[1]);
    MPI_Send(&out[5], 1, MPI_INT, rank, 40, MPI_COMM_WORLD);
    do {
        MPI_Testany(3, q, &idx, &flag, &st);
    } while (!flag);
    CHECK(idx == 1 && a[0] == out[5] && st.MPI_TAG == 40, "testany found it");

    /* sendrecv_replace around the ring */
    int x[2] = {rank, -rank};
    MPI_Sendrecv_replace(x, 2, MPI_INT, next, 50, prev, 50, MPI_COMM_WORLD, &st);
    CHECK(x[0] == prev && x[1] == -prev && st.MPI_SOURCE == prev, "replace %d %d", x[0], x[1]);

    /* MPI_PROC_NULL */
    MPI_Send(out, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
    MPI_Recv(in, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && n == 0, "receive from MPI_PROC_NULL");

    /* misuse */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(err_class(MPI_Bsend(out, 1, MPI_INT, rank, 60, MPI_COMM_WORLD)) == MPI_ERR_BUFFER, "bsend without a buffer");
    MPI_Request bogus = 12345;
    CHECK(err_class(MPI_Start(&bogus)) == MPI_ERR_REQUEST, "start of a bad request");
    int rc = report("p2pmodes");
    MPI_Finalize();
    return rc;
}
