#!/usr/bin/env python3
"""MPICH's own test suite against libp2pmpi, and under MPICH for the reference.

    tests/mpich/suite.py --mpich-src DIR [--impl p2pmp|mpich|both] [options]

DIR is an MPICH source tree (`apt-get source mpich` gives 4.0.2); its test/mpi
directories basic, pt2pt, coll, comm, group, datatype, init and errhan are built
with their mtest helpers and run with the rank counts their testlists give
(capped at --max-ranks, 8), each under a timeout (MPIEXEC_TIMEOUT, honoured by
both launchers, and a kill 15 s later as a backstop). p2pmp runs go through
`p2pjob run --local N -n N`, MPICH runs through `mpirun.mpich -n N`.

Scope (issue #13): a test is in scope when every MPI function its own source and
mtest call (compiled against MPICH's mpi.h claiming MPI_VERSION 1, so each
version test takes its MPI-1 path) is an MPI-1 function or one of the few MPI-2 functions MPI-1 programs and mtest use
(MPI2_ALLOWED below); anything else (MPI_Win_*, nonblocking collectives,
MPI_Comm_idup, MPIX_*, ...) puts it out of scope, and the table says which call
did. Both implementations are judged on the same scope.

A test passes as MPICH's runtests decides: exit status 0 and output (every
rank's lines, launcher chatter aside) of "No Errors" with nothing else but
"Test Passed" lines; resultTest=TestStatus / TestErrFatal tests pass on a
non-zero exit status. --expect tests/mpich/mpich-passes.txt makes the run
fail unless p2pmp passes 95% of the in-scope tests MPICH passes (the list of
the reference machine), without running MPICH. Results go to WORK/results-IMPL.json; with both files
present the summary compares p2pmp against MPICH: the target is p2pmp passing
at least 95% of the in-scope tests that pass under MPICH.

The basic directory has no testlist; its programs run on 1 or 2 ranks and pass
by exiting with 0 (they print what they do, not "No Errors").
Testlist lines that differ only in MPIR_CVAR_* environment (MPICH's internal
algorithm choices) are run once.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

DIRS = ["basic", "pt2pt", "coll", "comm", "group", "datatype", "init", "errhan"]
# basic has no testlist and its programs print what they do rather than "No
# Errors": they run on these rank counts and pass by exiting with 0.
BASIC_PROGRAMS = {"self": 1, "simple": 2, "sendrecv": 2, "srtest": 2, "wtime": 1, "patterns": 2}

# The MPI-1 functions (MPI 3.1, the chapters MPI-1.3 had; MPI_Get_version is
# MPI-1.2's, the deprecated MPI-1 names included).
MPI1 = set(
    """
Send Recv Get_count Bsend Ssend Rsend Buffer_attach Buffer_detach Isend Ibsend Issend
Irsend Irecv Wait Test Request_free Waitany Testany Waitall Testall Waitsome Testsome
Iprobe Probe Cancel Test_cancelled Send_init Bsend_init Ssend_init Rsend_init Recv_init
Start Startall Sendrecv Sendrecv_replace
Type_contiguous Type_vector Type_hvector Type_indexed Type_hindexed Type_struct Address
Type_extent Type_size Type_lb Type_ub Type_commit Type_free Get_elements Pack Unpack
Pack_size
Barrier Bcast Gather Gatherv Scatter Scatterv Allgather Allgatherv Alltoall Alltoallv
Reduce Op_create Op_free Allreduce Reduce_scatter Scan
Group_size Group_rank Group_translate_ranks Group_compare Comm_group Group_union
Group_intersection Group_difference Group_incl Group_excl Group_range_incl
Group_range_excl Group_free Comm_size Comm_rank Comm_compare Comm_dup Comm_create
Comm_split Comm_free Comm_test_inter Comm_remote_size Comm_remote_group
Intercomm_create Intercomm_merge Keyval_create Keyval_free Attr_put Attr_get Attr_delete
Cart_create Dims_create Graph_create Topo_test Graphdims_get Graph_get Cartdim_get
Cart_get Cart_rank Cart_coords Graph_neighbors_count Graph_neighbors Cart_shift Cart_sub
Cart_map Graph_map
Get_processor_name Get_version Errhandler_create Errhandler_set Errhandler_get
Errhandler_free Error_string Error_class Wtime Wtick Init Finalize Initialized Abort
Pcontrol
""".split()
)
# The MPI-2 functions issue #13 admits (what MPI-1 programs and mtest use), and
# the thread/errhandler/finalized calls libp2pmpi already had.
MPI2_ALLOWED = set(
    """
Comm_get_name Comm_set_name Type_get_envelope Get_address Type_create_struct
Type_create_resized Info_create Info_free Comm_get_attr Add_error_class Add_error_code
Add_error_string Comm_call_errhandler
Init_thread Query_thread Finalized Comm_set_errhandler Comm_get_errhandler
""".split()
)
ALLOWED = {"MPI_" + f for f in MPI1 | MPI2_ALLOWED}

MPITESTCONF = """/* written by tests/mpich/suite.py */
#ifndef MPITESTCONF_H_INCLUDED
#define MPITESTCONF_H_INCLUDED
#define HAVE_STDARG_H 1
#define HAVE_STDINT_H 1
#define HAVE_INTTYPES_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_STRINGS_H 1
#define HAVE_UNISTD_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define HAVE_USLEEP 1
#define HAVE_STRDUP 1
#define HAVE_LONG_LONG 1
#define HAVE_LONG_DOUBLE 1
#define HAVE__BOOL 1
#define STDC_HEADERS 1
#define SIZEOF_SHORT 2
#define SIZEOF_INT 4
#define SIZEOF_LONG 8
#define SIZEOF_LONG_LONG 8
#define SIZEOF_VOID_P 8
#define POINTERINT_t long
#define THREAD_PACKAGE_NAME THREAD_PACKAGE_POSIX
%s
#endif
"""
# What MPICH's configure finds in MPICH itself (MPI-2 and later features).
MPICH_EXTRA = "#define HAVE_MPI_WIN_CREATE 1\n#define HAVE_MPI_IO 1\n#define HAVE_MPI_SPAWN 1\n#define HAVE_MPI_INIT_THREAD 1"


class Test:
    def __init__(self, d, prog, np, args, opts, line):
        self.dir, self.prog, self.np, self.args, self.opts, self.line = d, prog, np, args, opts, line

    @property
    def name(self):
        return " ".join([f"{self.dir}/{self.prog}", str(self.np)] + self.args)


def parse_makefile(path):
    """Per-program SOURCES, CPPFLAGS and LDADD of an automake file."""
    text = path.read_text() if path.exists() else ""
    text = re.sub(r"\\\n", " ", text)
    vars_ = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_]+)\s*\+?=\s*(.*)$", line)
        if m:
            vars_[m.group(1)] = (vars_.get(m.group(1), "") + " " + m.group(2)).strip()
    return vars_


def program_build(d, prog, mk):
    srcs = mk.get(f"{prog}_SOURCES", f"{prog}.c").split()
    flags = [f for f in mk.get(f"{prog}_CPPFLAGS", "").split() if not f.startswith("$(")]
    ldadd = mk.get(f"{prog}_LDADD", "")
    return {"srcs": srcs, "cppflags": flags, "dtypes": "LDADDDATA" in ldadd, "libm": "-lm" in ldadd}


def read_tests(src, dirs, max_ranks):
    tests, seen = [], set()
    for d in dirs:
        base = src / d
        if d == "basic":
            for prog, np in BASIC_PROGRAMS.items():
                tests.append(Test(d, prog, np, [], {"resultTest": "ExitZero"}, f"{prog} {np} (no testlist)"))
            continue
        tl = base / "testlist.in"
        if not tl.exists():
            tl = base / "testlist"
        for raw in tl.read_text().splitlines():
            line = raw.strip()
            if not line or line.startswith("#") or "@" in line:
                continue  # comments and configure-conditional entries
            parts = line.split()
            prog, np = parts[0], int(parts[1]) if len(parts) > 1 else 1
            args, opts, envs = [], {}, []
            for kv in parts[2:]:
                k, _, v = kv.partition("=")
                if k == "arg":
                    args.append(v)
                elif k == "env":
                    envs.append(v)
                else:
                    opts[k] = v
            # MPICH-internal tunables: the same run for us.
            envs = [e for e in envs if not e.startswith("MPIR_CVAR_")]
            opts["env"] = envs
            np = min(np, max_ranks)
            key = (d, prog, np, tuple(args), tuple(envs))
            if key in seen:
                continue
            seen.add(key)
            tests.append(Test(d, prog, np, args, opts, line))
    return tests


def sh(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", **kw)


class Impl:
    def __init__(self, name, args, root):
        self.name = name
        self.work = Path(args.work) / name
        self.inc = self.work / "include"
        self.inc.mkdir(parents=True, exist_ok=True)
        (self.inc / "mpitestconf.h").write_text(MPITESTCONF % (MPICH_EXTRA if name == "mpich" else ""))
        if name == "p2pmp":
            b = Path(args.p2pmp_bin).resolve()
            self.cc = [str(b / "p2pmpicc")]
            self.launch = lambda n: [str(b / "p2pjob"), "run", "--local", str(n), "-n", str(n)]
        else:
            self.cc = ["mpicc.mpich"]
            self.launch = lambda n: ["mpirun.mpich", "-n", str(n)]

    def cflags(self, src):
        t = src / "include"
        return ["-w", "-O1", "-I", str(self.inc), "-I", str(t), "-I", str(src / "dtpools" / "include")]


def build_util(impl, src):
    """mtest.o, mtest_common.o, mtest_single.o and dtypes.o once per implementation."""
    out = impl.work / "util"
    out.mkdir(exist_ok=True)
    objs = {}
    for name in ["mtest", "mtest_common", "mtest_single", "dtypes"]:
        o = out / f"{name}.o"
        r = sh(impl.cc + impl.cflags(src) + ["-c", str(src / "util" / f"{name}.c"), "-o", str(o)])
        objs[name] = o if r.returncode == 0 else None
        if r.returncode != 0:
            print(f"{impl.name}: util/{name}.c does not build:\n{r.stdout[-3000:]}", file=sys.stderr)
    return objs


def scope_of(src, scope_inc, t, bld, cache):
    """The calls outside the admitted set that the test's sources and mtest make.

    Each source is compiled (-O1, so unused static helpers vanish) against
    MPICH's own mpi.h with MPI_VERSION set to 1, so every name is declared and
    every version test takes its MPI-1 path; the undefined MPI symbols of the
    objects are the calls made."""
    files = [src / t.dir / s for s in bld["srcs"]]
    files += [src / "util" / f for f in ["mtest.c", "mtest_common.c", "mtest_single.c"]]
    if bld["dtypes"]:
        files.append(src / "util" / "dtypes.c")
    calls = set()
    for f in files:
        key = (str(f), tuple(bld["cppflags"]))
        if key not in cache:
            obj = scope_inc / "scope.o"
            mpich_inc = (scope_inc / "mpich-include").read_text()
            r = sh(["cc", "-c", "-O1", "-w", "-I", str(scope_inc), "-I", mpich_inc, "-I", str(src / "include"),
                    "-I", str(src / "dtpools" / "include")] + bld["cppflags"] + [str(f), "-o", str(obj)])
            if r.returncode != 0:
                cache[key] = {"(does not compile as MPI-1)"}
            else:
                nm = sh(["nm", "-u", str(obj)]).stdout.split()
                cache[key] = {x for x in nm if re.match(r"^P?MPIX?_", x)}
                if any(x.startswith("DTP_") for x in nm):
                    # dtpools builds its types with MPI-2 and later calls.
                    cache[key].add("DTP_* (dtpools: MPI_Type_get_extent, MPI_Type_dup, ...)")
        calls |= cache[key]
    return sorted(c for c in calls if c not in ALLOWED)


def scope_header(scope_inc):
    """MPICH's mpi.h, claiming MPI-1.3."""
    h = sh(["mpicc.mpich", "-show"]).stdout
    m = re.search(r"-I(\S+)", h)
    if not m or not (Path(m.group(1)) / "mpi.h").exists():
        sys.exit("the scope needs MPICH's mpi.h (mpicc.mpich -show names its directory)")
    text = (Path(m.group(1)) / "mpi.h").read_text()
    text = re.sub(r"#define MPI_VERSION\s+\d+", "#define MPI_VERSION 1", text)
    text = re.sub(r"#define MPI_SUBVERSION\s+\d+", "#define MPI_SUBVERSION 3", text)
    (scope_inc / "mpi.h").write_text(text)
    (scope_inc / "mpich-include").write_text(m.group(1))
    (scope_inc / "mpitestconf.h").write_text(MPITESTCONF % "")


def run_test(impl, t, exe, timeout):
    env = dict(os.environ)
    env["MPIEXEC_TIMEOUT"] = str(timeout)
    for e in t.opts.get("env", []):
        k, _, v = e.partition("=")
        env[k] = v
    cmd = impl.launch(t.np) + [str(exe)] + t.args
    start = time.monotonic()
    p = subprocess.Popen(cmd, cwd=exe.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    timed_out = False
    try:
        out, _ = p.communicate(timeout=timeout + 15)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
    elapsed = time.monotonic() - start
    text = out.decode(errors="replace")
    if elapsed >= timeout or "timed out" in text.lower() and p.returncode != 0:
        timed_out = True
    return p.returncode, text, elapsed, timed_out


def program_lines(impl, text):
    """The ranks' own output lines (p2pjob prefixes them "[rank] "; its other lines are its own)."""
    if impl.name != "p2pmp":
        return text.splitlines()
    lines = []
    for line in text.splitlines():
        m = re.match(r"^\[\d+\] ?(.*)$", line)
        if m:
            lines.append(m.group(1))
    return lines


def judge(impl, t, rc, text):
    kind = t.opts.get("resultTest")
    if kind in ("TestStatus", "TestErrFatal"):
        return rc != 0, "needs a non-zero exit" if rc == 0 else ""
    if kind == "ExitZero":
        return rc == 0, f"exit {rc}" if rc else ""
    lines = program_lines(impl, text)
    noerr = any(re.match(r"^\s*No [Ee]rrors\s*$", l) for l in lines)
    other = [l for l in lines if not re.match(r"^\s*(No [Ee]rrors|Test Passed)\s*$", l) and l.strip()]
    if rc != 0:
        return False, f"exit {rc}"
    if not noerr:
        return False, "no 'No Errors'"
    if other:
        return False, "unexpected output"
    return True, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[2]
    ap.add_argument("--mpich-src", required=True, help="MPICH source tree (the one holding test/mpi)")
    ap.add_argument("--impl", default="p2pmp", choices=["p2pmp", "mpich", "both"])
    ap.add_argument("--dirs", default=",".join(DIRS))
    ap.add_argument("--only", default=None, help="regex on 'dir/prog np args'")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per test (a testlist timeLimit wins)")
    ap.add_argument("--max-ranks", type=int, default=8)
    ap.add_argument("--work", default="/tmp/p2pmp-mpich-suite")
    ap.add_argument("--p2pmp-bin", default=str(root / "target" / "release"))
    ap.add_argument("--no-build", action="store_true", help="do not build libp2pmpi and p2pjob with cargo first")
    ap.add_argument("--scope-only", action="store_true", help="list the scope decisions, build and run nothing")
    ap.add_argument("--in-scope-only", action="store_true", help="build and run only in-scope tests")
    ap.add_argument("--log", action="store_true", help="keep each failing test's output in WORK/IMPL/logs")
    ap.add_argument("--report", action="store_true", help="only print the table of the results in WORK")
    ap.add_argument("--expect", default=None, metavar="FILE",
                    help="exit 1 unless p2pmp passes 95%% of the tests FILE lists (tests/mpich/mpich-passes.txt:"
                         " the in-scope tests MPICH passes on the reference machine)")
    a = ap.parse_args()

    src = Path(a.mpich_src).resolve()
    if (src / "test" / "mpi").is_dir():
        src = src / "test" / "mpi"
    if not (src / "util" / "mtest.c").exists():
        sys.exit(f"{src}: not an MPICH test/mpi tree")
    dirs = a.dirs.split(",")
    if a.report:
        report(Path(a.work), dirs)
        return
    tests = read_tests(src, dirs, a.max_ranks)
    if a.only:
        tests = [t for t in tests if re.search(a.only, t.name)]
    impls = ["p2pmp", "mpich"] if a.impl == "both" else [a.impl]
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)

    if "p2pmp" in impls and not a.no_build and not a.scope_only:
        r = subprocess.run(["cargo", "build", "--release", "-q", "-p", "p2pmp-capi", "-p", "p2pmp-jobd"], cwd=root)
        if r.returncode != 0:
            sys.exit("cargo build failed")

    # Scope, decided once against p2pmp's mpi.h.
    conf = work / "scope-include"
    conf.mkdir(exist_ok=True)
    scope_header(conf)
    mks, cache = {}, {}
    for t in tests:
        if t.dir not in mks:
            mks[t.dir] = parse_makefile(src / t.dir / "Makefile.am")
        t.bld = program_build(t.dir, t.prog, mks[t.dir])
        t.outside = scope_of(src, conf, t, t.bld, cache)
    if a.scope_only:
        for t in tests:
            print(f"{t.name:<50} {'in scope' if not t.outside else 'out: ' + ' '.join(t.outside[:4])}")
        n = sum(1 for t in tests if not t.outside)
        print(f"{len(tests)} tests, {n} in scope")
        return

    for name in impls:
        impl = Impl(name, a, root)
        objs = build_util(impl, src)
        results = {}
        logs = impl.work / "logs"
        logs.mkdir(exist_ok=True)
        print(f"== {name}: {len(tests)} tests")
        for t in tests:
            if a.in_scope_only and t.outside:
                continue
            res = {"dir": t.dir, "scope": not t.outside, "outside": t.outside, "np": t.np}
            bdir = impl.work / t.dir
            bdir.mkdir(exist_ok=True)
            exe = bdir / t.prog
            if not hasattr(t, "built_" + name):
                extra = [objs["mtest"], objs["mtest_common"], objs["mtest_single"]] + ([objs["dtypes"]] if t.bld["dtypes"] else [])
                if None in extra:
                    r = subprocess.CompletedProcess([], 1, "mtest does not build", "")
                else:
                    r = sh(impl.cc + impl.cflags(src) + t.bld["cppflags"] + [str(src / t.dir / s) for s in t.bld["srcs"]]
                           + [str(o) for o in extra] + ["-o", str(exe), "-lm"])
                setattr(t, "built_" + name, r.returncode == 0)
                if r.returncode != 0 and a.log:
                    (logs / f"{t.dir}-{t.prog}.build").write_text(r.stdout)
            res["built"] = getattr(t, "built_" + name)
            if not res["built"]:
                res.update(status="build", why="does not build")
            else:
                limit = int(t.opts.get("timeLimit", a.timeout))
                rc, text, secs, timed_out = run_test(impl, t, exe, limit)
                ok, why = judge(impl, t, rc, text)
                res.update(secs=round(secs, 2))
                if ok:
                    res.update(status="pass", why="")
                elif timed_out:
                    res.update(status="timeout", why=f"over {limit} s")
                else:
                    res.update(status="fail", why=why)
                if not ok and a.log:
                    (logs / f"{t.dir}-{t.prog}-{t.np}{'-'.join(t.args)}.out").write_text(text)
            results[t.name] = res
            scope = "in " if res["scope"] else "out"
            print(f"  {t.name:<48} {scope} {res['status']:<8} {res.get('secs', ''):>6} {res['why']}"
                  + (f" [{' '.join(t.outside[:3])}]" if t.outside else ""), flush=True)
        (work / f"results-{name}.json").write_text(json.dumps(results, indent=1))
    report(work, dirs)
    if a.expect:
        want = [l.strip() for l in Path(a.expect).read_text().splitlines() if l.strip() and not l.startswith("#")]
        got = json.loads((work / "results-p2pmp.json").read_text())
        ran = [k for k in want if k in got]
        ok = [k for k in ran if got[k]["status"] == "pass"]
        for k in ran:
            if got[k]["status"] != "pass":
                print(f"  expected to pass: {k}: {got[k]['status']} {got[k]['why']}")
        pct = 100.0 * len(ok) / max(1, len(ran))
        print(f"expect: p2pmp passes {len(ok)} of the {len(ran)} listed tests it ran ({pct:.1f}%; at least 95% needed)")
        if pct < 95.0:
            sys.exit(1)


def report(work, dirs):
    res = {}
    for name in ["p2pmp", "mpich"]:
        f = work / f"results-{name}.json"
        if f.exists():
            res[name] = json.loads(f.read_text())
    # One scope for both, the latest run's (an older run may have decided
    # otherwise); a test the latest run did not list counts as out of scope.
    newest = max(res, key=lambda n: (work / f"results-{n}.json").stat().st_mtime) if res else None
    scope = {k for k, v in res.get(newest, {}).items() if v["scope"]}
    print()
    print(f"{'dir':<9} {'impl':<6} {'tests':>5} {'scope':>5} | in scope: {'built':>5} {'pass':>5} {'fail':>5} {'t/o':>5}")
    for d in dirs + ["all"]:
        for name, r in res.items():
            rows = {k: v for k, v in r.items() if d == "all" or v["dir"] == d}
            ins = [v for k, v in rows.items() if k in scope]
            c = lambda s: sum(1 for v in ins if v["status"] == s)
            print(f"{d:<9} {name:<6} {len(rows):>5} {len(ins):>5} | {'':>9} {sum(1 for v in ins if v['built']):>5}"
                  f" {c('pass'):>5} {c('fail'):>5} {c('timeout'):>5}")
    if "p2pmp" in res and "mpich" in res:
        ref = [k for k, v in res["mpich"].items() if k in scope and v["status"] == "pass" and k in res["p2pmp"]]
        ours = [k for k in ref if res["p2pmp"][k]["status"] == "pass"]
        pct = 100.0 * len(ours) / max(1, len(ref))
        print()
        for k in ref:
            if res["p2pmp"][k]["status"] != "pass":
                print(f"  passes under MPICH, not p2pmp: {k}: {res['p2pmp'][k]['status']} {res['p2pmp'][k]['why']}")
        for k, v in res["p2pmp"].items():
            if k in scope and v["status"] == "pass" and res["mpich"].get(k, {}).get("status") != "pass":
                print(f"  passes under p2pmp, not MPICH: {k}: {res['mpich'].get(k, {}).get('status', 'not run')}")
        print(f"summary: p2pmp passes {len(ours)} of the {len(ref)} in-scope tests MPICH passes ({pct:.1f}%; target 95%)")
    else:
        for name, r in res.items():
            ins = [v for k, v in r.items() if k in scope]
            print(f"summary: {name} passes {sum(1 for v in ins if v['status'] == 'pass')} of {len(ins)} in-scope tests")


if __name__ == "__main__":
    main()
