/* Communicators: MPI_Comm_split / create / dup / compare / free, names,
 * intercommunicators (create, test_inter, remote size and group, merge,
 * point to point across, split and create on them), attributes and
 * error handlers. Each communicator is its own matching space. Needs 2+
 * ranks for the intercommunicator part (runs the rest on 1). */
#include <string.h>
#include "check.h"

static int deleted = 0;
static int del_fn(MPI_Comm c, int k, void *v, void *x) {
    (void)c; (void)k; (void)x;
    deleted += *(int *)v;
    return MPI_SUCCESS;
}
static int handled = 0;
static void on_error(MPI_Comm *c, int *code, ...) {
    (void)c;
    handled = *code;
}

int main(int argc, char **argv) {
    int rank, size, r, n, res, flag;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* split by parity, ordered by descending world rank */
    MPI_Comm half, dup, made;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    MPI_Comm_size(half, &n);
    MPI_Comm_rank(half, &r);
    int mine = rank % 2 == 0 ? (size + 1) / 2 : size / 2;
    CHECK(n == mine, "half size %d", n);
    CHECK(r == (mine - 1) - rank / 2, "half rank %d", r);
    MPI_Comm none;
    MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &none);
    CHECK(rank == 0 ? none == MPI_COMM_NULL : none != MPI_COMM_NULL, "MPI_UNDEFINED colour");
    if (none != MPI_COMM_NULL) MPI_Comm_free(&none);

    /* dup: congruent, its own matching space */
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_compare(dup, MPI_COMM_WORLD, &res);
    CHECK(res == MPI_CONGRUENT, "dup vs world %d", res);
    MPI_Comm_compare(dup, dup, &res);
    CHECK(res == MPI_IDENT, "dup vs itself %d", res);
    MPI_Comm_compare(half, MPI_COMM_WORLD, &res);
    CHECK(size == 1 ? res == MPI_CONGRUENT : res == MPI_UNEQUAL, "half vs world %d", res);
    int a = 1, b = 2, got[2];
    MPI_Request q[2];
    MPI_Irecv(&got[0], 1, MPI_INT, rank, 0, MPI_COMM_WORLD, &q[0]);
    MPI_Irecv(&got[1], 1, MPI_INT, rank, 0, dup, &q[1]);
    MPI_Send(&b, 1, MPI_INT, rank, 0, dup);
    MPI_Send(&a, 1, MPI_INT, rank, 0, MPI_COMM_WORLD);
    MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
    CHECK(got[0] == 1 && got[1] == 2, "messages kept to their communicator: %d %d", got[0], got[1]);

    /* create from a group: the reverse of the world */
    MPI_Group wg, rev;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int ranges[1][3] = {{size - 1, 0, -1}};
    MPI_Group_range_incl(wg, 1, ranges, &rev);
    MPI_Comm_create(MPI_COMM_WORLD, rev, &made);
    MPI_Comm_rank(made, &r);
    CHECK(r == size - 1 - rank, "rank in the reversed communicator %d", r);
    int sum = 0;
    MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, made);
    CHECK(sum == size * (size - 1) / 2, "allreduce on it %d", sum);
    MPI_Comm_compare(made, MPI_COMM_WORLD, &res);
    CHECK(res == (size == 1 ? MPI_CONGRUENT : MPI_SIMILAR), "reversed vs world %d", res);

    /* names */
    char name[MPI_MAX_OBJECT_NAME];
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &n);
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && n == 14, "world name %s", name);
    MPI_Comm_set_name(dup, "the dup");
    MPI_Comm_get_name(dup, name, &n);
    CHECK(strcmp(name, "the dup") == 0, "dup name %s", name);

    /* attributes: predefined and a keyval with a delete callback */
    int *ub;
    MPI_Attr_get(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767, "MPI_TAG_UB");
    int key, v = 5;
    MPI_Keyval_create(MPI_DUP_FN, del_fn, &key, NULL);
    MPI_Attr_put(dup, key, &v);
    MPI_Comm copy;
    MPI_Comm_dup(dup, &copy);
    int *p;
    MPI_Attr_get(copy, key, &p, &flag);
    CHECK(flag && p == &v, "attribute copied by MPI_DUP_FN");
    MPI_Comm_free(&copy);
    CHECK(deleted == 5 && copy == MPI_COMM_NULL, "delete callback on free (%d)", deleted);
    MPI_Attr_delete(dup, key);
    MPI_Attr_get(dup, key, &p, &flag);
    CHECK(!flag && deleted == 10, "attribute deleted");
    MPI_Keyval_free(&key);
    CHECK(key == MPI_KEYVAL_INVALID, "keyval freed");

    /* a program's error handler */
    MPI_Errhandler eh, got_eh;
    MPI_Errhandler_create(on_error, &eh);
    MPI_Errhandler_set(dup, eh);
    MPI_Errhandler_get(dup, &got_eh);
    CHECK(got_eh == eh, "handler set");
    int rc = MPI_Send(&a, 1, MPI_INT, size, 0, dup);
    CHECK(err_class(rc) == MPI_ERR_RANK && err_class(handled) == MPI_ERR_RANK, "handler called (%d, %d)", rc, handled);
    MPI_Comm_call_errhandler(dup, MPI_ERR_OTHER);
    CHECK(err_class(handled) == MPI_ERR_OTHER, "MPI_Comm_call_errhandler (%d)", handled);
    MPI_Errhandler_free(&eh);
    CHECK(eh == MPI_ERRHANDLER_NULL, "handler freed");

    if (size >= 2) {
        /* intercommunicator of the two halves; leaders world ranks 0 and 1 */
        MPI_Comm inter, merged, isplit, icreate;
        int leader = rank % 2 == 0 ? 1 : 0, lrank;
        MPI_Comm_size(half, &n);
        MPI_Intercomm_create(half, n - 1, MPI_COMM_WORLD, leader, 7, &inter);
        MPI_Comm_test_inter(inter, &flag);
        CHECK(flag, "test_inter");
        MPI_Comm_remote_size(inter, &n);
        CHECK(n == size - mine, "remote size %d", n);
        MPI_Group remote;
        MPI_Comm_remote_group(inter, &remote);
        MPI_Group_size(remote, &n);
        CHECK(n == size - mine, "remote group size %d", n);
        MPI_Group_free(&remote);
        /* rank 0 of each side exchanges with the other side's rank 0 */
        MPI_Comm_rank(inter, &lrank);
        if (lrank == 0) {
            int out = rank, in = -1;
            MPI_Status st;
            MPI_Sendrecv(&out, 1, MPI_INT, 0, 3, &in, 1, MPI_INT, 0, 3, inter, &st);
            int want = rank % 2 == 0 ? (size % 2 == 0 ? size - 1 : size - 2) : size - 1 - (size % 2 == 0 ? 1 : 0);
            CHECK(in == want && st.MPI_SOURCE == 0, "across the intercommunicator: got %d from %d", in, st.MPI_SOURCE);
        }
        MPI_Intercomm_merge(inter, rank % 2, &merged);
        MPI_Comm_rank(merged, &r);
        MPI_Comm_size(merged, &n);
        CHECK(n == size, "merged size %d", n);
        CHECK(rank % 2 == 0 ? r < mine : r >= size - mine, "low group first: rank %d", r);
        MPI_Comm_split(inter, 0, rank, &isplit);
        MPI_Comm_test_inter(isplit, &flag);
        CHECK(flag, "split of an intercommunicator is one");
        MPI_Group lg;
        MPI_Comm_group(inter, &lg);
        MPI_Comm_create(inter, lg, &icreate);
        MPI_Comm_remote_size(icreate, &n);
        CHECK(n == size - mine, "create on an intercommunicator: remote %d", n);
        MPI_Group_free(&lg);
        MPI_Comm_free(&icreate);
        MPI_Comm_free(&isplit);
        MPI_Comm_free(&merged);
        MPI_Comm_free(&inter);
    }

    /* misuse */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm w = MPI_COMM_WORLD;
    CHECK(err_class(MPI_Comm_free(&w)) == MPI_ERR_COMM, "freeing the world");
    CHECK(err_class(MPI_Comm_size(MPI_COMM_NULL, &n)) == MPI_ERR_COMM, "MPI_COMM_NULL");
    MPI_Comm_remote_size(MPI_COMM_WORLD, &n);
#ifdef P2PMPI /* MPICH 4.0.2 answers another class */
    CHECK(err_class(MPI_Comm_remote_size(MPI_COMM_WORLD, &n)) == MPI_ERR_COMM, "remote size of an intracommunicator");
#else
    check_count++; /* counted alike, so the summaries compare */
#endif

    MPI_Group_free(&rev);
    MPI_Group_free(&wg);
    MPI_Comm_free(&made);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    rc = report("comms");
    MPI_Finalize();
    return rc;
}
