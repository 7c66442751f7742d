/* Groups: every MPI_Group_* call, MPI_Comm_group, and misuse under
 * MPI_ERRORS_RETURN. Runs on any number of ranks. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, n, r, res;
    MPI_Group world, evens, odds, u, i, d, g, rg;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_size(world, &n);
    CHECK(n == size, "world group size %d", n);
    MPI_Group_rank(world, &r);
    CHECK(r == rank, "world group rank %d", r);

    /* evens = 0, 2, 4, ...; odds = the rest, in reverse order */
    int ranges[1][3] = {{0, size - 1, 2}};
    MPI_Group_range_incl(world, 1, ranges, &evens);
    MPI_Group_size(evens, &n);
    CHECK(n == (size + 1) / 2, "evens size %d", n);
    MPI_Group_rank(evens, &r);
    CHECK(rank % 2 == 0 ? r == rank / 2 : r == MPI_UNDEFINED, "rank in evens %d", r);
    MPI_Group_difference(world, evens, &d);
    int nodd;
    MPI_Group_size(d, &nodd);
    CHECK(nodd == size / 2, "difference size %d", nodd);
    int rev[64];
    for (int k = 0; k < nodd; k++) rev[k] = nodd - 1 - k;
    MPI_Group_incl(d, nodd, rev, &odds);
    if (nodd > 0) {
        int first = 0, t;
        MPI_Group_translate_ranks(odds, 1, &first, world, &t);
        CHECK(t == 2 * nodd - 1, "odds[0] is world rank %d", t);
    }
    MPI_Group_union(evens, odds, &u);
    MPI_Group_size(u, &n);
    CHECK(n == size, "union size %d", n);
    MPI_Group_compare(u, world, &res);
    CHECK(res == (size <= 2 ? MPI_IDENT : MPI_SIMILAR), "union vs world %d", res);
    MPI_Group_intersection(world, evens, &i);
    MPI_Group_compare(i, evens, &res);
    CHECK(res == MPI_IDENT, "intersection vs evens %d", res);
    MPI_Group_excl(world, 1, &rank, &g);
    MPI_Group_size(g, &n);
    CHECK(n == size - 1, "excl size %d", n);
    MPI_Group_rank(g, &r);
    CHECK(r == MPI_UNDEFINED, "excluded rank %d", r);
    int ex[1][3] = {{0, size - 1, 1}};
    MPI_Group_range_excl(world, 1, ex, &rg);
    CHECK(rg == MPI_GROUP_EMPTY, "excluding everyone is MPI_GROUP_EMPTY");
    MPI_Group_compare(evens, odds, &res);
    CHECK(size == 1 || res == MPI_UNEQUAL, "evens vs odds %d", res);

    /* translate with MPI_PROC_NULL and a rank not in the target */
    int in[2] = {MPI_PROC_NULL, 0}, out[2];
    MPI_Group_translate_ranks(world, 2, in, odds, out);
#ifdef P2PMPI /* MPICH 4.0.2 translates MPI_PROC_NULL to MPI_UNDEFINED */
    CHECK(out[0] == MPI_PROC_NULL && out[1] == MPI_UNDEFINED, "translate %d %d", out[0], out[1]);
#else
    check_count++; /* counted alike, so the summaries compare */
#endif

    /* misuse */
    int bad = size, dup2[2] = {0, 0};
    CHECK(err_class(MPI_Group_incl(world, 1, &bad, &g)) == MPI_ERR_RANK, "incl of rank %d", bad);
#ifdef P2PMPI /* MPICH 4.0.2 does not refuse it */
    CHECK(err_class(MPI_Group_incl(world, 2, dup2, &g)) == MPI_ERR_RANK, "incl of a rank twice");
#else
    check_count++; /* counted alike, so the summaries compare */
#endif
    int zero[1][3] = {{0, 0, 0}};
    CHECK(err_class(MPI_Group_range_incl(world, 1, zero, &g)) == MPI_ERR_ARG, "zero stride");
    CHECK(err_class(MPI_Group_size(MPI_GROUP_NULL, &n)) == MPI_ERR_GROUP, "MPI_GROUP_NULL");

    MPI_Group_free(&evens);
    CHECK(evens == MPI_GROUP_NULL, "freed group is MPI_GROUP_NULL");
    MPI_Group_free(&odds);
    MPI_Group_free(&u);
    MPI_Group_free(&i);
    MPI_Group_free(&d);
    MPI_Group_free(&world);
    int rc = report("groups");
    MPI_Finalize();
    return rc;
}
