#!/usr/bin/env bash
# Builds the C programs of tests/c with p2pmpicc and with MPICH's mpicc.mpich,
# runs each on several rank counts with `p2pjob run --local N -n N` and with
# `mpirun.mpich -n N`, and checks the two print the same stdout (rank 0's
# results; timings go to stderr and are not compared).
#
# Usage: tests/c/compare-mpich.sh [RANKS...]   (default: 1 2 3)
# Exit: 0 all agree (or MPICH not installed), 1 some output differs or a
# p2pmp run failed. A run MPICH does not finish within $TIMEOUT seconds
# (default 120; MPICH busy-polls and slows down badly when ranks outnumber
# cores) is reported as a timeout and not compared.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ranks=${*:-1 2 3}
timeout=${TIMEOUT:-120}

if ! command -v mpicc.mpich >/dev/null || ! command -v mpirun.mpich >/dev/null; then
    echo "MPICH not installed (no mpicc.mpich / mpirun.mpich), skipped"
    exit 0
fi

target=${CARGO_TARGET_DIR:-$root/target}/debug
(cd "$root" && cargo build -q -p p2pmp-capi -p p2pmp-jobd --lib --bin p2pmpicc --bin p2pjob) || exit 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# program and arguments, one run per line
runs=(
    "ring 300"
    "pingpong 5"
    "collectives"
    "anysource 40"
    "sendrecv"
    "ssend"
    "errors"
    "factor 1000036000099 1000000"
    "factor 1000003 1000"
    "groups"
    "comms"
    "topo"
    "datatypes"
    "p2pmodes"
    "collv"
)

for prog in ring pingpong collectives anysource sendrecv ssend errors factor groups comms topo datatypes p2pmodes collv; do
    mkdir -p "$work/p2pmp" "$work/mpich"
    "$target/p2pmpicc" -std=c99 -O2 "$here/$prog.c" -o "$work/p2pmp/$prog" || exit 1
    mpicc.mpich -std=c99 -O2 "$here/$prog.c" -o "$work/mpich/$prog" || exit 1
done

agree=0 differ=0 timeouts=0
for n in $ranks; do
    for run in "${runs[@]}"; do
        set -- $run
        prog=$1
        shift
        # p2pjob prefixes rank output with "[rank] "; its own progress lines go to stderr.
        p2p=$(cd "$work" && timeout "$timeout" "$target/p2pjob" run --local "$n" -n "$n" "$work/p2pmp/$prog" "$@" 2>/dev/null)
        p2p_rc=$?
        p2p=$(printf '%s\n' "$p2p" | sed -n 's/^\[[0-9]*\] //p')
        mpich=$(cd "$work" && timeout "$timeout" mpirun.mpich -n "$n" "$work/mpich/$prog" "$@" 2>/dev/null)
        mpich_rc=$?
        label=$(printf '%-34s n=%s' "$run" "$n")
        if [ $p2p_rc -ne 0 ]; then
            echo "FAIL     $label: p2pmp run exited $p2p_rc"
            differ=$((differ + 1))
        elif [ $mpich_rc -eq 124 ]; then
            echo "timeout  $label: MPICH did not finish in ${timeout}s; not compared"
            timeouts=$((timeouts + 1))
        elif [ "$p2p" = "$mpich" ] && [ $mpich_rc -eq 0 ]; then
            echo "agree    $label: $(printf '%s\n' "$p2p" | tail -1)"
            agree=$((agree + 1))
        else
            echo "DIFFER   $label (MPICH exit $mpich_rc)"
            diff <(printf '%s\n' "$mpich") <(printf '%s\n' "$p2p") | sed 's/^/    /'
            differ=$((differ + 1))
        fi
    done
done
echo "compare-mpich: $agree agree, $differ differ, $timeouts MPICH timeouts"
[ $differ -eq 0 ]
