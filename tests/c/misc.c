/* The rest: the MPIp2p.h header name, MPI_Add_error_class / _code / _string
 * with MPI_Error_class / _string on them and MPI_LASTUSEDCODE,
 * MPI_Info_create / _free, MPI_Pcontrol, MPI_Get_version, MPI_Comm_get_attr
 * of the predefined keys. Runs on any number of ranks. */
#include <MPIp2p.h>
#include <string.h>
#include "check.h"

int main(int argc, char **argv) {
    int v, sv, cls, code, code2, len, flag, *p;
    char s[MPI_MAX_ERROR_STRING];
    MPI_Init(&argc, &argv);
    MPI_Get_version(&v, &sv);
    CHECK(v == MPI_VERSION && v == 1 && sv == MPI_SUBVERSION, "version %d.%d", v, sv);

    MPI_Add_error_class(&cls);
    CHECK(cls > MPI_ERR_LASTCODE, "new class %d", cls);
    MPI_Add_error_code(cls, &code);
    MPI_Add_error_code(cls, &code2);
    CHECK(code != code2 && code > cls, "new codes %d %d", code, code2);
    MPI_Add_error_string(code, "a code of ours");
    MPI_Error_string(code, s, &len);
    CHECK(strcmp(s, "a code of ours") == 0 && len == 14, "string %s", s);
    MPI_Error_class(code2, &v);
    CHECK(v == cls, "class of the code %d", v);
    MPI_Error_class(cls, &v);
    CHECK(v == cls, "a class is its own class");
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &p, &flag);
    CHECK(flag && *p == code2, "MPI_LASTUSEDCODE %d", *p);
    MPI_Error_string(MPI_ERR_RANK, s, &len);
    CHECK(strstr(s, "MPI_ERR_RANK") != NULL, "predefined string %s", s);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(err_class(MPI_Add_error_code(cls + 1000, &v)) == MPI_ERR_ARG, "code of an unknown class");
    CHECK(err_class(MPI_Comm_call_errhandler(MPI_COMM_WORLD, code)) == MPI_SUCCESS, "call_errhandler under ERRORS_RETURN");

    MPI_Info info;
    MPI_Info_create(&info);
    CHECK(info != MPI_INFO_NULL, "info made");
    MPI_Info_free(&info);
    CHECK(info == MPI_INFO_NULL, "info freed");

    CHECK(err_class(MPI_Pcontrol(1)) == MPI_SUCCESS && MPI_Pcontrol(0, "extra") == MPI_SUCCESS, "pcontrol");
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &p, &flag);
    CHECK(flag && (*p == 0 || *p == 1), "MPI_WTIME_IS_GLOBAL");
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &p, &flag);
    CHECK(flag && *p == MPI_PROC_NULL, "MPI_HOST");
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_IO, &p, &flag);
    CHECK(flag && *p == MPI_ANY_SOURCE, "MPI_IO");
    MPI_Comm_get_attr(MPI_COMM_SELF, MPI_TAG_UB, &p, &flag);
    CHECK(!flag, "predefined attributes live on MPI_COMM_WORLD");
    int rc = report("misc");
    MPI_Finalize();
    return rc;
}
