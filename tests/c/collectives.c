/* Every collective with checked results: several roots, counts, datatypes and
 * operations, on MPI_COMM_WORLD, a duplicate of it, and MPI_COMM_SELF. */
#include <stdlib.h>
#include <string.h>
#include "check.h"

static const int counts[] = {1, 5, 1000};
#define NCOUNTS 3

/* Allreduce and Reduce of element i = f(rank, i) for one C type, every op the
 * type allows, checked against the sequential result. */
#define REDUCE_TEST(T, MT, INTEGER)                                                                  \
    static void reduce_##T(MPI_Comm comm) {                                                          \
        int rank, size;                                                                              \
        MPI_Comm_rank(comm, &rank);                                                                  \
        MPI_Comm_size(comm, &size);                                                                  \
        MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR, MPI_BAND, MPI_BOR};   \
        int nops = INTEGER ? 8 : 4;                                                                  \
        for (int c = 0; c < NCOUNTS; c++) {                                                          \
            int n = counts[c];                                                                       \
            T *in = malloc(n * sizeof(T)), *out = malloc(n * sizeof(T)), *want = malloc(n * sizeof(T)); \
            for (int o = 0; o < nops; o++) {                                                         \
                for (int i = 0; i < n; i++) in[i] = (T)((rank + i) % 5 + (o == 1 ? 0 : rank % 3));   \
                for (int i = 0; i < n; i++) {                                                        \
                    T acc = (T)(i % 5);                                                              \
                    for (int r = 1; r < size; r++) {                                                 \
                        T x = (T)((r + i) % 5 + (o == 1 ? 0 : r % 3));                               \
                        switch (o) {                                                                 \
                        case 0: acc = acc + x; break;                                                \
                        case 1: acc = acc * x; break;                                                \
                        case 2: acc = x > acc ? x : acc; break;                                      \
                        case 3: acc = x < acc ? x : acc; break;                                      \
                        default: acc = integer_op_##T(o, acc, x);                                    \
                        }                                                                            \
                    }                                                                                \
                    want[i] = acc;                                                                   \
                }                                                                                    \
                memset(out, 0, n * sizeof(T));                                                       \
                MPI_Allreduce(in, out, n, MT, ops[o], comm);                                         \
                CHECK(memcmp(out, want, n * sizeof(T)) == 0, "Allreduce " #T " op %d count %d", o, n); \
                int root = (o + c) % size;                                                           \
                memset(out, 0, n * sizeof(T));                                                       \
                MPI_Reduce(in, out, n, MT, ops[o], root, comm);                                      \
                if (rank == root)                                                                    \
                    CHECK(memcmp(out, want, n * sizeof(T)) == 0, "Reduce " #T " op %d root %d", o, root); \
            }                                                                                        \
            free(in);                                                                                \
            free(out);                                                                               \
            free(want);                                                                              \
        }                                                                                            \
    }

#define INTEGER_OP(T)                                                                                \
    static T integer_op_##T(int o, T a, T b) {                                                       \
        switch (o) {                                                                                 \
        case 4: return (T)(a && b);                                                                  \
        case 5: return (T)(a || b);                                                                  \
        case 6: return (T)(a & b);                                                                   \
        default: return (T)(a | b);                                                                  \
        }                                                                                            \
    }

typedef long long llong;
typedef unsigned char uchar;
typedef unsigned short ushort;
INTEGER_OP(int)
INTEGER_OP(llong)
INTEGER_OP(uchar)
INTEGER_OP(ushort)
static double integer_op_double(int o, double a, double b) { (void)o; (void)b; return a; }
static float integer_op_float(int o, float a, float b) { (void)o; (void)b; return a; }
REDUCE_TEST(int, MPI_INT, 1)
REDUCE_TEST(llong, MPI_LONG_LONG, 1)
REDUCE_TEST(uchar, MPI_UNSIGNED_CHAR, 1)
REDUCE_TEST(ushort, MPI_UNSIGNED_SHORT, 1)
REDUCE_TEST(double, MPI_DOUBLE, 0)
REDUCE_TEST(float, MPI_FLOAT, 0)

static void data_movement(MPI_Comm comm, const char *name) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Barrier(comm);
    for (int c = 0; c < NCOUNTS; c++) {
        int n = counts[c];
        int *blk = malloc(n * sizeof(int)), *all = malloc((size_t)n * size * sizeof(int));
        int *all2 = malloc((size_t)n * size * sizeof(int));
        for (int root = 0; root < size; root++) {
            /* Bcast */
            for (int i = 0; i < n; i++) blk[i] = rank == root ? root * 1000 + i : -1;
            MPI_Bcast(blk, n, MPI_INT, root, comm);
            int ok = 1;
            for (int i = 0; i < n; i++) ok &= blk[i] == root * 1000 + i;
            CHECK(ok, "%s Bcast root %d count %d", name, root, n);
            /* Gather */
            for (int i = 0; i < n; i++) blk[i] = rank * 100000 + i;
            memset(all, 0xff, (size_t)n * size * sizeof(int));
            MPI_Gather(blk, n, MPI_INT, all, n, MPI_INT, root, comm);
            if (rank == root) {
                ok = 1;
                for (int r = 0; r < size; r++)
                    for (int i = 0; i < n; i++) ok &= all[r * n + i] == r * 100000 + i;
                CHECK(ok, "%s Gather root %d count %d", name, root, n);
            }
            /* Scatter */
            if (rank == root)
                for (int r = 0; r < size; r++)
                    for (int i = 0; i < n; i++) all[r * n + i] = r * 7 + i + root;
            memset(blk, 0, n * sizeof(int));
            MPI_Scatter(all, n, MPI_INT, blk, n, MPI_INT, root, comm);
            ok = 1;
            for (int i = 0; i < n; i++) ok &= blk[i] == rank * 7 + i + root;
            CHECK(ok, "%s Scatter root %d count %d", name, root, n);
        }
        /* Allgather */
        for (int i = 0; i < n; i++) blk[i] = rank * 31 + i;
        MPI_Allgather(blk, n, MPI_INT, all, n, MPI_INT, comm);
        int ok = 1;
        for (int r = 0; r < size; r++)
            for (int i = 0; i < n; i++) ok &= all[r * n + i] == r * 31 + i;
        CHECK(ok, "%s Allgather count %d", name, n);
        /* Alltoall: block j of rank r holds r*1000 + j*10 + i */
        for (int j = 0; j < size; j++)
            for (int i = 0; i < n; i++) all[j * n + i] = rank * 1000 + j * 10 + i;
        MPI_Alltoall(all, n, MPI_INT, all2, n, MPI_INT, comm);
        ok = 1;
        for (int r = 0; r < size; r++)
            for (int i = 0; i < n; i++) ok &= all2[r * n + i] == r * 1000 + rank * 10 + i;
        CHECK(ok, "%s Alltoall count %d", name, n);
        free(blk);
        free(all);
        free(all2);
    }
    /* Byte-typed data movement, and different send/recv types of equal size. */
    char word[6] = "hello";
    if (rank != 0) memset(word, 0, sizeof word);
    MPI_Bcast(word, 6, MPI_CHAR, 0, comm);
    CHECK(strcmp(word, "hello") == 0, "%s Bcast of chars: %s", name, word);
    double d = rank + 0.25, *ds = malloc(size * sizeof(double));
    MPI_Allgather(&d, 8, MPI_BYTE, ds, 1, MPI_DOUBLE, comm);
    CHECK(ds[size - 1] == size - 1 + 0.25, "%s Allgather bytes as double: %g", name, ds[size - 1]);
    free(ds);
}

static void all_reductions(MPI_Comm comm) {
    reduce_int(comm);
    reduce_llong(comm);
    reduce_uchar(comm);
    reduce_ushort(comm);
    reduce_double(comm);
    reduce_float(comm);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    all_reductions(MPI_COMM_WORLD);
    data_movement(MPI_COMM_WORLD, "world");

    /* MPI_IN_PLACE reductions. */
    long v[3] = {rank, 2 * rank, 1};
    MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long s = (long)size * (size - 1) / 2;
    CHECK(v[0] == s && v[1] == 2 * s && v[2] == size, "in-place Allreduce %ld %ld %ld", v[0], v[1], v[2]);
    unsigned u = 1u << rank % 32, ur = u;
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : &u, &ur, 1, MPI_UNSIGNED, MPI_BOR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        unsigned w = 0;
        for (int r = 0; r < size; r++) w |= 1u << r % 32;
        CHECK(ur == w, "in-place Reduce BOR %x", ur);
    }

    /* A duplicate keeps its collectives apart from the world's. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    int drank, dsize;
    MPI_Comm_rank(dup, &drank);
    MPI_Comm_size(dup, &dsize);
    CHECK(drank == rank && dsize == size, "dup rank/size %d %d", drank, dsize);
    reduce_int(dup);
    data_movement(dup, "dup");
    MPI_Comm_free(&dup);

    /* MPI_COMM_SELF: one process, every collective a copy. */
    int srank, ssize;
    MPI_Comm_rank(MPI_COMM_SELF, &srank);
    MPI_Comm_size(MPI_COMM_SELF, &ssize);
    CHECK(srank == 0 && ssize == 1, "self rank/size %d %d", srank, ssize);
    reduce_double(MPI_COMM_SELF);
    data_movement(MPI_COMM_SELF, "self");

    int code = report("collectives");
    MPI_Finalize();
    return code;
}
