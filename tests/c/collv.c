/* Collectives beyond the basic eight: MPI_Gatherv, MPI_Scatterv,
 * MPI_Allgatherv, MPI_Alltoallv, MPI_Reduce_scatter, MPI_Scan, MPI_Op_create
 * / MPI_Op_free (commutative and not), MPI_MINLOC / MPI_MAXLOC on MPI_2INT
 * and MPI_DOUBLE_INT, MPI_LXOR / MPI_BXOR, MPI_IN_PLACE, derived datatypes
 * in a collective, and the collectives on an intercommunicator. Any size. */
#include <stdlib.h>
#include "check.h"

/* 2x2 matrix product, not commutative: inout = in * inout */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2],
                    a[2] * b[1] + a[3] * b[3]};
        for (int i = 0; i < 4; i++) b[i] = c[i];
    }
}

static void addint(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    for (int i = 0; i < *len; i++) ((int *)inout)[i] += ((int *)in)[i];
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
    int total = 0;
    for (int i = 0; i < size; i++) {
        counts[i] = i + 1;
        displs[i] = total + i; /* a gap of i ints before block i */
        total += 2 * i + 1;
    }
    int *big = calloc(total + size, sizeof(int)), mine[64];
    for (int k = 0; k < rank + 1; k++) mine[k] = 1000 * rank + k;

    /* gatherv to the last rank, then scatterv back */
    int root = size - 1;
    MPI_Gatherv(mine, rank + 1, MPI_INT, big, counts, displs, MPI_INT, root, MPI_COMM_WORLD);
    if (rank == root) {
        int ok = 1;
        for (int i = 0; i < size; i++)
            for (int k = 0; k < i + 1; k++) ok &= big[displs[i] + k] == 1000 * i + k;
        CHECK(ok, "gatherv blocks in place");
        for (int i = 0; i < size; i++)
            for (int k = 0; k < i + 1; k++) big[displs[i] + k] += 7;
    }
    int back[64];
    MPI_Scatterv(big, counts, displs, MPI_INT, back, rank + 1, MPI_INT, root, MPI_COMM_WORLD);
    CHECK(back[rank] == 1000 * rank + rank + 7, "scatterv %d", back[rank]);

    /* allgatherv with MPI_IN_PLACE */
    for (int k = 0; k < rank + 1; k++) big[displs[rank] + k] = -(1000 * rank + k);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big, counts, displs, MPI_INT, MPI_COMM_WORLD);
    int ok = 1;
    for (int i = 0; i < size; i++) ok &= big[displs[i] + i] == -(1000 * i + i);
    CHECK(ok, "allgatherv in place");

    /* alltoallv: j+1 ints to rank j, each (rank, j) */
    int *sc = malloc(size * sizeof(int)), *sd = malloc(size * sizeof(int));
    int *rc = malloc(size * sizeof(int)), *rd = malloc(size * sizeof(int));
    int *sb = malloc(size * (size + 1) * sizeof(int)), *rb = malloc(size * (rank + 1) * sizeof(int));
    for (int j = 0, off = 0; j < size; j++) {
        sc[j] = j + 1;
        sd[j] = off;
        for (int k = 0; k < j + 1; k++) sb[off + k] = 100 * rank + j;
        off += j + 1;
        rc[j] = rank + 1;
        rd[j] = j * (rank + 1);
    }
    MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, MPI_COMM_WORLD);
    ok = 1;
    for (int j = 0; j < size; j++) ok &= rb[rd[j]] == 100 * j + rank && rb[rd[j] + rank] == 100 * j + rank;
    CHECK(ok, "alltoallv");

    /* reduce_scatter: rank i gets i+1 sums */
    int *in = malloc((total + 1) * sizeof(int)), *rs = malloc(64 * sizeof(int));
    int n = 0;
    for (int i = 0; i < size; i++) n += counts[i];
    for (int k = 0; k < n; k++) in[k] = k + rank;
    MPI_Reduce_scatter(in, rs, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int first = rank * (rank + 1) / 2;
    CHECK(rs[0] == size * first + size * (size - 1) / 2, "reduce_scatter %d", rs[0]);

    /* scan with a commutative user op, and with a non-commutative one */
    MPI_Op add, mm;
    MPI_Op_create(addint, 1, &add);
    MPI_Op_create(matmul, 0, &mm);
    int one = rank + 1, pre = 0;
    MPI_Scan(&one, &pre, 1, MPI_INT, add, MPI_COMM_WORLD);
    CHECK(pre == (rank + 1) * (rank + 2) / 2, "scan %d", pre);
    /* [[1,r],[0,1]] products: the top right is the sum of ranks, in any order;
     * [[1,1],[0,1]]^k mixed with [[1,0],[1,1]] shows the order. */
    int m[4] = {1, rank % 2 ? 0 : 1, rank % 2 ? 1 : 0, 1}, prod[4];
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_INT, &mat);
    MPI_Type_commit(&mat);
    MPI_Allreduce(m, prod, 1, mat, mm, MPI_COMM_WORLD);
    int want[4] = {1, 0, 0, 1};
    for (int r = 0; r < size; r++) {
        int a[4] = {1, r % 2 ? 0 : 1, r % 2 ? 1 : 0, 1}, c[4];
        c[0] = want[0] * a[0] + want[1] * a[2];
        c[1] = want[0] * a[1] + want[1] * a[3];
        c[2] = want[2] * a[0] + want[3] * a[2];
        c[3] = want[2] * a[1] + want[3] * a[3];
        for (int i = 0; i < 4; i++) want[i] = c[i];
    }
    CHECK(prod[0] == want[0] && prod[1] == want[1] && prod[2] == want[2] && prod[3] == want[3],
          "non-commutative allreduce in rank order: %d %d %d %d", prod[0], prod[1], prod[2], prod[3]);
    int red[4] = {0};
    MPI_Reduce(m, red, 1, mat, mm, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1) CHECK(red[1] == want[1] && red[2] == want[2], "non-commutative reduce to the last rank");
    MPI_Op_free(&add);
    MPI_Op_free(&mm);
    CHECK(add == MPI_OP_NULL, "op freed");

    /* MINLOC / MAXLOC */
    struct { int v, i; } p = {rank % 3, rank}, q;
    MPI_Allreduce(&p, &q, 1, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    CHECK(q.v == 0 && q.i == 0, "minloc %d at %d", q.v, q.i);
    struct { double v; int i; } d = {-(double)rank, rank}, e;
    MPI_Allreduce(&d, &e, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(e.v == 0.0 && e.i == 0, "maxloc %g at %d", e.v, e.i);

    /* logical and bitwise xor, in place */
    int x[2] = {1, 1 << (rank % 8)};
    MPI_Allreduce(MPI_IN_PLACE, x, 2, MPI_INT, MPI_LXOR, MPI_COMM_WORLD);
    CHECK(x[0] == size % 2, "lxor %d", x[0]);
    unsigned char bx = (unsigned char)(1 << (rank % 8)), bxr;
    MPI_Allreduce(&bx, &bxr, 1, MPI_BYTE, MPI_BXOR, MPI_COMM_WORLD);
    unsigned char wantx = 0;
    for (int r = 0; r < size; r++) wantx ^= (unsigned char)(1 << (r % 8));
    CHECK(bxr == wantx, "bxor %d", bxr);

    /* a derived type in a gather: a column of 2x2 ints */
    MPI_Datatype col;
    MPI_Type_vector(2, 1, 2, MPI_INT, &col);
    MPI_Type_commit(&col);
    int mine2[4] = {rank, -1, rank + 100, -1}, *cols = malloc(2 * size * sizeof(int));
    MPI_Gather(mine2, 1, col, cols, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) CHECK(cols[2 * (size - 1) + 1] == size - 1 + 100, "gather of columns");

    /* intercommunicator collectives: evens and odds */
    if (size >= 2) {
        MPI_Comm half, inter;
        MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
        MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 9, &inter);
        int lr, rsz;
        MPI_Comm_rank(half, &lr);
        MPI_Comm_remote_size(inter, &rsz);
        int v = rank, sum = 0;
        MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, inter);
        int ws = 0;
        for (int r = (rank + 1) % 2; r < size; r += 2) ws += r;
        CHECK(sum == ws, "inter allreduce: the other group's sum %d", sum);
        int b = 42;
        if (rank % 2 == 0) MPI_Bcast(&b, 1, MPI_INT, lr == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
        else {
            b = 0;
            MPI_Bcast(&b, 1, MPI_INT, 0, inter);
            CHECK(b == 42, "inter bcast");
        }
        int *all = malloc(rsz * sizeof(int));
        MPI_Allgather(&v, 1, MPI_INT, all, 1, MPI_INT, inter);
        CHECK(all[rsz - 1] == (rank % 2 ? 2 * (rsz - 1) : 2 * (rsz - 1) + 1), "inter allgather");
        MPI_Barrier(inter);
        free(all);
        MPI_Comm_free(&inter);
        MPI_Comm_free(&half);
    }

    /* misuse */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    float f = 1, g;
    CHECK(err_class(MPI_Allreduce(&f, &g, 1, MPI_FLOAT, MPI_BAND, MPI_COMM_WORLD)) == MPI_ERR_OP, "band on floats");
    CHECK(err_class(MPI_Allreduce(&f, &g, 1, MPI_FLOAT, MPI_MINLOC, MPI_COMM_WORLD)) == MPI_ERR_OP, "minloc on floats");

    MPI_Type_free(&mat);
    MPI_Type_free(&col);
    free(cols); free(in); free(rs); free(sb); free(rb); free(sc); free(sd); free(rc); free(rd);
    free(big); free(counts); free(displs);
    int ret = report("collv");
    MPI_Finalize();
    return ret;
}
