/* Topologies: MPI_Dims_create, MPI_Cart_create / _get / _rank / _coords /
 * _shift / _sub / _map, MPI_Cartdim_get, MPI_Graph_create / _get /
 * _neighbors_count / _neighbors / _map, MPI_Graphdims_get, MPI_Topo_test.
 * Runs on any number of ranks. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, t, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int dims[2] = {0, 0}, periods[2] = {1, 0};
    MPI_Dims_create(size, 2, dims);
    CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1], "dims %d x %d", dims[0], dims[1]);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Topo_test(cart, &t);
    CHECK(t == MPI_CART, "topo_test %d", t);
    MPI_Topo_test(MPI_COMM_WORLD, &t);
    CHECK(t == MPI_UNDEFINED, "world has no topology");
    MPI_Cartdim_get(cart, &n);
    CHECK(n == 2, "cartdim %d", n);
    int gd[2], gp[2], gc[2], r;
    MPI_Cart_get(cart, 2, gd, gp, gc);
    CHECK(gd[0] == dims[0] && gp[0] == 1 && gp[1] == 0, "cart_get");
    CHECK(gc[0] == rank / dims[1] && gc[1] == rank % dims[1], "my coordinates %d %d", gc[0], gc[1]);
    MPI_Cart_rank(cart, gc, &r);
    CHECK(r == rank, "cart_rank %d", r);
    int cc[2];
    MPI_Cart_coords(cart, size - 1, 2, cc);
    CHECK(cc[0] == dims[0] - 1 && cc[1] == dims[1] - 1, "coords of the last rank");
    int src, dst;
    MPI_Cart_shift(cart, 0, 1, &src, &dst);
    CHECK(dst == ((gc[0] + 1) % dims[0]) * dims[1] + gc[1], "periodic shift dest %d", dst);
    CHECK(src == ((gc[0] + dims[0] - 1) % dims[0]) * dims[1] + gc[1], "periodic shift source %d", src);
    MPI_Cart_shift(cart, 1, 1, &src, &dst);
    CHECK(gc[1] == dims[1] - 1 ? dst == MPI_PROC_NULL : dst == rank + 1, "non-periodic shift dest %d", dst);
    CHECK(gc[1] == 0 ? src == MPI_PROC_NULL : src == rank - 1, "non-periodic shift source %d", src);
    /* rows: keep dimension 1 */
    int keep[2] = {0, 1};
    MPI_Comm row;
    MPI_Cart_sub(cart, keep, &row);
    MPI_Comm_size(row, &n);
    MPI_Comm_rank(row, &r);
    CHECK(n == dims[1] && r == gc[1], "row size %d rank %d", n, r);
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, row);
    int first = gc[0] * dims[1];
    CHECK(sum == dims[1] * first + dims[1] * (dims[1] - 1) / 2, "sum over my row %d", sum);
    int nr;
    MPI_Cart_map(MPI_COMM_WORLD, 2, dims, periods, &nr);
    CHECK(nr == rank, "cart_map %d", nr);

    /* a ring as a graph */
    int index[64], edges[128];
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + size - 1) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    MPI_Comm g;
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g);
    MPI_Topo_test(g, &t);
    CHECK(t == MPI_GRAPH, "graph topo_test %d", t);
    int nn, ne;
    MPI_Graphdims_get(g, &nn, &ne);
    CHECK(nn == size && ne == 2 * size, "graphdims %d %d", nn, ne);
    int gi[64], ge[128];
    MPI_Graph_get(g, size, 2 * size, gi, ge);
    CHECK(gi[size - 1] == 2 * size && ge[1] == 1 % size, "graph_get");
    MPI_Graph_neighbors_count(g, rank, &n);
    CHECK(n == 2, "neighbours count %d", n);
    int nb[2];
    MPI_Graph_neighbors(g, rank, 2, nb);
    CHECK(nb[0] == (rank + size - 1) % size && nb[1] == (rank + 1) % size, "neighbours %d %d", nb[0], nb[1]);
    MPI_Graph_map(MPI_COMM_WORLD, 1, index, edges, &nr);
    CHECK(rank == 0 ? nr == 0 : nr == MPI_UNDEFINED, "graph_map %d", nr);
    /* a Cartesian grid smaller than the world leaves ranks out */
    int one[1] = {1}, per[1] = {0};
    MPI_Comm small;
    MPI_Cart_create(MPI_COMM_WORLD, 1, one, per, 0, &small);
    CHECK(rank == 0 ? small != MPI_COMM_NULL : small == MPI_COMM_NULL, "ranks beyond the grid");
    if (small != MPI_COMM_NULL) MPI_Comm_free(&small);
    /* a duplicate keeps its topology */
    MPI_Comm d;
    MPI_Comm_dup(cart, &d);
    MPI_Topo_test(d, &t);
    CHECK(t == MPI_CART, "dup keeps the topology");
    /* misuse */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int bad[2] = {size + 1, 1};
    CHECK(err_class(MPI_Dims_create(size, 2, bad)) == MPI_ERR_DIMS, "dims that do not divide");
    CHECK(err_class(MPI_Cartdim_get(MPI_COMM_WORLD, &n)) == MPI_ERR_TOPOLOGY, "no topology");
    MPI_Comm_free(&d);
    MPI_Comm_free(&g);
    MPI_Comm_free(&row);
    MPI_Comm_free(&cart);
    int rc = report("topo");
    MPI_Finalize();
    return rc;
}
