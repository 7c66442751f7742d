/* Derived datatypes: every constructor, commit/free, the queries (size,
 * extent, lb, ub, envelope), MPI_Address/MPI_Get_address, MPI_LB/MPI_UB
 * markers, Pack/Unpack/Pack_size, Get_count/Get_elements, and sending a
 * matrix column (vector) to be received as contiguous ints, a struct through
 * MPI_BOTTOM, and a type freed while in use. Runs on any number of ranks. */
#include <string.h>
#include "check.h"

struct item { char c; double d; int i; };

int main(int argc, char **argv) {
    int rank, size, n;
    MPI_Aint a, lb, ub;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* contiguous, vector, hvector */
    MPI_Datatype c4, col, hcol;
    MPI_Type_contiguous(4, MPI_INT, &c4);
    MPI_Type_vector(3, 1, 4, MPI_INT, &col); /* a column of a 3x4 matrix */
    MPI_Type_hvector(3, 1, 4 * sizeof(int), MPI_INT, &hcol);
    MPI_Type_commit(&c4);
    MPI_Type_commit(&col);
    MPI_Type_commit(&hcol);
    MPI_Type_size(col, &n);
    MPI_Type_extent(col, &a);
    CHECK(n == 12 && a == 36, "column size %d extent %ld", n, (long)a);
    MPI_Type_size(c4, &n);
    MPI_Type_extent(c4, &a);
    CHECK(n == 16 && a == 16, "contiguous size %d extent %ld", n, (long)a);
    int comb, ni, na, nd;
    MPI_Type_get_envelope(col, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1, "vector envelope");
    MPI_Type_get_envelope(hcol, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_HVECTOR && ni == 2 && na == 1, "hvector envelope");
    MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_NAMED, "named");

    /* column 1 of my matrix to the next rank, received as 3 contiguous ints */
    int m[3][4], got[3];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) m[i][j] = 100 * rank + 10 * i + j;
    MPI_Status st;
    MPI_Sendrecv(&m[0][1], 1, col, next, 1, got, 3, MPI_INT, prev, 1, MPI_COMM_WORLD, &st);
    CHECK(got[0] == 100 * prev + 1 && got[2] == 100 * prev + 21, "column received %d %d", got[0], got[2]);
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 3, "count %d", n);
    MPI_Get_count(&st, col, &n);
    CHECK(n == 1, "count in columns %d", n);
    /* the other way: contiguous ints into a column (hvector) */
    int back[3][4];
    memset(back, 0, sizeof back);
    MPI_Sendrecv(got, 3, MPI_INT, prev, 2, &back[0][2], 1, hcol, next, 2, MPI_COMM_WORLD, &st);
    CHECK(back[0][2] == 100 * rank + 1 && back[2][2] == 100 * rank + 21 && back[1][1] == 0, "into a column");

    /* indexed and hindexed */
    int bl[2] = {2, 1}, dis[2] = {3, 0};
    MPI_Aint hdis[2] = {12, 0};
    MPI_Datatype ix, hix;
    MPI_Type_indexed(2, bl, dis, MPI_INT, &ix);
    MPI_Type_hindexed(2, bl, hdis, MPI_INT, &hix);
    MPI_Type_commit(&ix);
    MPI_Type_commit(&hix);
    MPI_Type_lb(ix, &lb);
    MPI_Type_ub(ix, &ub);
    CHECK(lb == 0 && ub == 20, "indexed bounds %ld %ld", (long)lb, (long)ub);
    int src[5] = {1, 2, 3, 4, 5}, packed[3];
    int pos = 0, psize;
    MPI_Pack_size(1, ix, MPI_COMM_WORLD, &psize);
    CHECK(psize == 12, "pack size %d", psize);
    MPI_Pack(src, 1, ix, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    CHECK(pos == 12 && packed[0] == 4 && packed[1] == 5 && packed[2] == 1, "packed %d %d %d", packed[0], packed[1], packed[2]);
    int dst[5] = {0};
    pos = 0;
    MPI_Unpack(packed, sizeof packed, &pos, dst, 1, hix, MPI_COMM_WORLD);
    CHECK(pos == 12 && dst[3] == 4 && dst[4] == 5 && dst[0] == 1 && dst[1] == 0, "unpacked through hindexed");

    /* struct with C padding, through MPI_BOTTOM with absolute addresses */
    struct item it = {'x', 2.5, 7}, in;
    int sbl[3] = {1, 1, 1};
    MPI_Aint sdis[3], base;
    MPI_Datatype sty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, itype, abs_t;
    MPI_Get_address(&it, &base);
    MPI_Address(&it.c, &sdis[0]);
    MPI_Get_address(&it.d, &sdis[1]);
    MPI_Get_address(&it.i, &sdis[2]);
    MPI_Type_create_struct(3, sbl, sdis, sty, &abs_t);
    MPI_Type_commit(&abs_t);
    for (int k = 0; k < 3; k++) sdis[k] -= base;
    MPI_Type_struct(3, sbl, sdis, sty, &itype);
    MPI_Type_commit(&itype);
    MPI_Type_extent(itype, &a);
    MPI_Type_size(itype, &n);
    CHECK(a == (MPI_Aint)sizeof(struct item) && n == 13, "struct extent %ld size %d", (long)a, n);
    it.i = rank;
    MPI_Sendrecv(MPI_BOTTOM, 1, abs_t, next, 3, &in, 1, itype, prev, 3, MPI_COMM_WORLD, &st);
    CHECK(in.c == 'x' && in.d == 2.5 && in.i == prev, "struct via MPI_BOTTOM: %c %g %d", in.c, in.d, in.i);
    MPI_Get_elements(&st, itype, &n);
    CHECK(n == 3, "elements %d", n);

    /* markers and resizing */
    MPI_Datatype mk, rs, mty[3] = {MPI_LB, MPI_INT, MPI_UB};
    int mbl[3] = {1, 1, 1};
    MPI_Aint mdis[3] = {-4, 0, 12};
    MPI_Type_struct(3, mbl, mdis, mty, &mk);
    MPI_Type_lb(mk, &lb);
    MPI_Type_extent(mk, &a);
    CHECK(lb == -4 && a == 16, "markers: lb %ld extent %ld", (long)lb, (long)a);
    MPI_Type_create_resized(MPI_INT, 0, 8, &rs);
    MPI_Type_commit(&rs);
    int spaced[6] = {1, 0, 2, 0, 3, 0}, three[3];
    MPI_Sendrecv(spaced, 3, rs, rank, 4, three, 3, MPI_INT, rank, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(three[0] == 1 && three[1] == 2 && three[2] == 3, "resized stride");

    /* a partial message: elements but no whole count */
    MPI_Sendrecv(src, 5, MPI_INT, rank, 5, dst, 2, c4, rank, 5, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, c4, &n);
    CHECK(n == MPI_UNDEFINED, "5 ints are not whole vectors of 4 (%d)", n);
    MPI_Get_elements(&st, c4, &n);
    CHECK(n == 5, "but 5 elements (%d)", n);

    /* freed while a receive uses it */
    MPI_Request rq;
    int late[3];
    MPI_Datatype tmp;
    MPI_Type_contiguous(3, MPI_INT, &tmp);
    MPI_Type_commit(&tmp);
    MPI_Irecv(late, 1, tmp, rank, 6, MPI_COMM_WORLD, &rq);
    MPI_Type_free(&tmp);
    CHECK(tmp == MPI_DATATYPE_NULL, "freed");
    MPI_Send(src, 3, MPI_INT, rank, 6, MPI_COMM_WORLD);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    CHECK(late[2] == 3, "received through a freed type");

    /* misuse */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype unc, pre = MPI_INT;
    MPI_Type_contiguous(2, MPI_INT, &unc);
    CHECK(err_class(MPI_Send(src, 1, unc, rank, 7, MPI_COMM_WORLD)) == MPI_ERR_TYPE, "uncommitted type");
    CHECK(err_class(MPI_Type_free(&pre)) == MPI_ERR_TYPE, "freeing a predefined type");
    CHECK(err_class(MPI_Type_contiguous(-1, MPI_INT, &tmp)) != MPI_SUCCESS, "negative count");
    pos = 10;
#ifdef P2PMPI /* MPICH 4.0.2 does not refuse it */
    CHECK(err_class(MPI_Pack(src, 1, ix, packed, sizeof packed, &pos, MPI_COMM_WORLD)) != MPI_SUCCESS, "pack overflow");
#else
    check_count++; /* counted alike, so the summaries compare */
#endif

    MPI_Type_free(&unc);
    MPI_Type_free(&rs);
    MPI_Type_free(&mk);
    MPI_Type_free(&itype);
    MPI_Type_free(&abs_t);
    MPI_Type_free(&ix);
    MPI_Type_free(&hix);
    MPI_Type_free(&c4);
    MPI_Type_free(&col);
    MPI_Type_free(&hcol);
    int rc = report("datatypes");
    MPI_Finalize();
    return rc;
}
