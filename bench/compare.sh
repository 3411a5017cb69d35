#!/usr/bin/env bash
# bench/compare.sh: strata against Open MPI, MPICH and Gloo, in one run, at the same sizes, with 2
# ranks on this machine, for allreduce, allgather, reduce_scatter and broadcast.
#
#   bash bench/compare.sh [--strata PATH] [--sizes 8,64K,1M,16M,64M,256M] [--iters 20] [--warmup 5]
#                         [--colls allreduce,allgather,reduce_scatter,bcast] [--transports shm,tcp,ucx]
#                         [--ucx-tls tcp,sm] [--peers openmpi,mpich,gloo] [--repeat N]
#                         [--malloc-default] [--out DIR] [--timeout SECONDS] [--bind core|none]
#
# How to read it
# - One table per transport and collective. Each row is one SIZE in bytes, meaning the collective's
#   largest buffer as in nccl-tests (for allgather and reduce_scatter: all nranks blocks).
# - Columns: strata's bus bandwidth in GB/s, then per peer its bus bandwidth and "x" = strata/peer.
#   x > 1 means strata moved data faster. busbw = size / time * (2(n-1)/n for allreduce, (n-1)/n for
#   allgather and reduce_scatter, 1 for broadcast), the nccl-tests definition, so numbers of
#   different collectives compare with the link speed.
# - Rows below 4 KiB (the 8 B row by default) show the latency instead: time per call in µs, and
#   x = strata/peer time, so there x < 1 means strata is faster. The row is marked "lat".
# - time = the maximum over ranks of the mean of ITERS back-to-back calls, after WARMUP calls.
# - "FAIL" marks a result whose correctness check failed (every program checks exactly, with
#   integer-valued float32 data); "unsupported" a collective the peer lacks (Gloo has no
#   reduce_scatter on CPU); "missing: why" a peer that could not be built or run; nothing is skipped
#   silently.
# - shm also gets a second table per collective, "strata(mem)": strata run with `bench -R 1`, its
#   buffers from strata_mem_alloc, which the other ranks of the host map, so allreduce,
#   reduce_scatter and allgather take the direct algorithms (docs/comm.md). The peers keep their
#   malloc buffers in both tables; MPI has no counterpart that speeds up its collectives (as NCCL's
#   ncclMemAlloc/registration has, which is what this mirrors).
# - Transports. shm: strata over shared memory, Open MPI with its default selection (the ob1 PML
#   with the vader shared-memory BTL on a machine without InfiniBand), MPICH with its default (Debian
#   builds ch4:ucx; on one host it uses its POSIX shared-memory module, and UCX's sysv/cma for the
#   rest). tcp: strata with `launch --tcp`; Open MPI with `--mca pml ob1 --mca btl tcp,self
#   --mca btl_tcp_if_include lo`; MPICH with MPIR_CVAR_NOLOCAL=1 (skip its shared-memory module;
#   MPIR_CVAR_CH3_NOLOCAL is the same variable under an older name, there is no ch3 in this build)
#   plus UCX_TLS=tcp,self UCX_NET_DEVICES=lo, because NOLOCAL alone hands the traffic to UCX, which
#   then still picks sysv/cma shared memory (check: UCX_LOG_LEVEL=info prints ep_cfg[..]: tag(tcp/lo)).
#   Gloo only has TCP: it is run once and its numbers appear in both tables, labelled gloo(tcp).
#   ucx (not run by default): everybody over UCX, once per UCX_TLS in --ucx-tls (tables "ucx-tcp",
#   "ucx-sm"; each runs with UCX_TLS=<tls>,self, and UCX_NET_DEVICES=lo for tcp): strata with
#   STRATA_COMM_TRANSPORT=ucx (docs/comm.md "UCX transport"), Open MPI with --mca pml ucx (and
#   pml_ucx_devices/pml_ucx_tls "any": by default it takes UCX only on InfiniBand devices), MPICH
#   (ch4:ucx) with MPIR_CVAR_NOLOCAL=1 so that its own shared-memory module stays out. Gloo has no
#   UCX and is left out of these tables.
# - Placement: one binding policy for all, --bind (default core: each rank on a core of its own, what
#   strata launch and Open MPI do by default): strata launch --bind-to, Open MPI --bind-to, MPICH
#   -bind-to. Gloo is spawned by torch.multiprocessing, which does not bind. Open MPI gets
#   --oversubscribe only so that it starts where it counts fewer than 2 slots.
# - Memory bandwidth: with allreduce over shm, bench/membw.c (strata_membw, built beside strata)
#   measures what 2 threads streaming a[i] += b[i] move per second at each size from 1 MiB, and a
#   table sets strata's allreduce time against the floor that rate gives: a 2-rank allreduce of S
#   bytes reads both inputs and writes both outputs, 4 S bytes.
# - Targets: the last table lists issue 18's targets with the figure, the ratio and whether it is
#   met (targets live here, in the benchmark, not in tests).
# - Noise: MPI libraries busy-poll, so any other load on the machine (a build, a test run) costs them
#   whole scheduler time slices and their numbers collapse by 10-1000x. Check the load average
#   (printed at the start and the end) and use --repeat N on a shared machine: every program then
#   runs N times, interleaved, and each cell shows its best run (lowest time); summary.json keeps
#   every run. Differences under ~15% are not a result.
# - Memory: Open MPI and MPICH allocate a temporary buffer in every large allreduce/reduce_scatter;
#   glibc serves anything over 32 MiB with a fresh mmap, so every call first-touches new pages. In
#   a VM that backs guest memory lazily (measured here: 13 us per 4 KiB first-touch fault, 220 ms
#   per 64 MiB, against ~3 ms to rewrite the same 64 MiB) that alone made the MPIs 10x slower from
#   64 MiB up. So by default every program (strata too) runs with MALLOC_MMAP_MAX_=0 and a huge
#   MALLOC_TRIM_THRESHOLD_, which keep freed memory in the heap and let the peers reuse it;
#   --malloc-default runs everything with glibc's defaults instead.
#
# Output: the tables on stdout; DIR/summary.json (every number, every missing peer and why, the
# commands) and DIR/raw/*.jsonl (each program's JSON lines). Exit status 0 when strata ran and all of
# its checks passed, 1 otherwise; a missing or failing peer is reported but does not fail the run.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
SIZES=8,64K,1M,16M,64M,256M
ITERS=20
WARMUP=5
COLLS=allreduce,allgather,reduce_scatter,bcast
TRANSPORTS=shm,tcp
UCX_TLS_LIST=tcp,sm
PEERS=openmpi,mpich,gloo
OUT=
STRATA=${STRATA_BIN:-}
TIMEOUT=900
REPEAT=1
BIND=core
MALLOC_TUNING=1
PY=/usr/bin/python3

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
    --strata) STRATA=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --iters | -n) ITERS=$2; shift 2 ;;
    --warmup | -w) WARMUP=$2; shift 2 ;;
    --colls) COLLS=$2; shift 2 ;;
    --transports) TRANSPORTS=$2; shift 2 ;;
    --ucx-tls) UCX_TLS_LIST=$2; shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --malloc-default) MALLOC_TUNING=0; shift ;;
    --bind) BIND=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
COLLS=${COLLS//broadcast/bcast}
# The ucx transport stands for one table per UCX_TLS: ucx-tcp, ucx-sm, ...
RUN_TRANSPORTS=""
for tr in ${TRANSPORTS//,/ }; do
    if [ "$tr" = ucx ]; then
        for tls in ${UCX_TLS_LIST//,/ }; do RUN_TRANSPORTS+="${RUN_TRANSPORTS:+,}ucx-$tls"; done
    else
        RUN_TRANSPORTS+="${RUN_TRANSPORTS:+,}$tr"
    fi
done

if [ -z "$STRATA" ]; then
    for c in "$root/build/release/strata" "$root/build/dev/strata"; do
        [ -x "$c" ] && { STRATA=$c; break; }
    done
fi
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/strata-compare.XXXXXX")
mkdir -p "$OUT/raw" "$OUT/bin" "$OUT/log"
rm -f "$OUT"/raw/*.jsonl
: >"$OUT/missing.txt"
: >"$OUT/partial.txt"
: >"$OUT/commands.txt"

missing() { # missing RUN-NAME REASON
    printf '%s\t%s\n' "$1" "$2" >>"$OUT/missing.txt"
    echo "compare.sh: $1 missing: $2" >&2
}
has_peer() { case ",$PEERS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
has_transport() { case ",$RUN_TRANSPORTS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# run NAME LABEL COMMAND...: runs a benchmark program, appending its JSON lines (the launcher's
# "[r0] " prefix removed) to raw/NAME.jsonl; its output is kept in log/LABEL.{out,err}. A run that
# fails without a single result makes NAME missing; one that fails after some results is "partial".
run() {
    local name=$1 label=$2
    shift 2
    printf '%s: %s\n' "$label" "$*" >>"$OUT/commands.txt"
    echo "compare.sh: running $label" >&2
    timeout -k 10 "$TIMEOUT" "$@" >"$OUT/log/$label.out" 2>"$OUT/log/$label.err" </dev/null
    local rc=$?
    local got
    got=$(sed -n 's/^\(\[r[0-9]*\] \)\{0,1\}\({.*}\)$/\2/p' "$OUT/log/$label.out")
    [ -n "$got" ] && printf '%s\n' "$got" >>"$OUT/raw/$name.jsonl"
    if [ $rc -ne 0 ]; then
        local why="exit status $rc"
        [ $rc -eq 124 ] && why="timed out after ${TIMEOUT}s"
        why="$label: $why: $(grep -v '^[[:space:]]*$' "$OUT/log/$label.err" | tail -n 2 | tr '\n' ' ' | cut -c1-300)"
        if [ -z "$got" ]; then
            missing "$name" "$why"
        else
            echo "compare.sh: partial results: $why" >&2
            printf '%s\t%s\n' "$name" "$why" >>"$OUT/partial.txt"
        fi
    fi
}

# ---- build the peers ----------------------------------------------------------------------------

ompi_env=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
ompi_run=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to "$BIND" -np 2)
if [ "$MALLOC_TUNING" = 1 ]; then
    # Inherited by every program below (mpirun.mpich forwards the whole environment, Open MPI is
    # told explicitly).
    export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736
    ompi_run+=(-x MALLOC_MMAP_MAX_ -x MALLOC_TRIM_THRESHOLD_)
fi
mpich_run=(mpirun.mpich -bind-to "$BIND" -np 2)
peer_args=(--sizes "$SIZES" -n "$ITERS" -w "$WARMUP" -c 1 --json)

build_mpi() { # build_mpi NAME COMPILER LAUNCHER
    local name=$1 cc=$2 launcher=$3
    if ! command -v "$cc" >/dev/null; then
        missing "$name" "$cc not found (Debian package lib$name-dev)"
        return 1
    fi
    if ! command -v "$launcher" >/dev/null; then
        missing "$name" "$launcher not found"
        return 1
    fi
    if ! "$cc" -O2 -o "$OUT/bin/peer_$name" "$here/peer_mpi.c" 2>"$OUT/log/build_$name.err"; then
        missing "$name" "build with $cc failed: $(head -n 3 "$OUT/log/build_$name.err" | tr '\n' ' ')"
        return 1
    fi
}
have_openmpi=0 have_mpich=0 have_gloo=0
has_peer openmpi && build_mpi openmpi mpicc.openmpi mpirun.openmpi && have_openmpi=1
has_peer mpich && build_mpi mpich mpicc.mpich mpirun.mpich && have_mpich=1
if has_peer gloo; then
    if "$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>"$OUT/log/gloo_probe.err"; then
        have_gloo=1
    else
        missing gloo "$PY cannot import torch.distributed with gloo: $(tail -n 1 "$OUT/log/gloo_probe.err")"
    fi
fi
have_strata=0
if [ -n "$STRATA" ] && [ -x "$STRATA" ]; then
    have_strata=1
else
    missing strata "no strata binary (build it: cmake --preset release && cmake --build build/release, or pass --strata PATH)"
fi

# ---- run ----------------------------------------------------------------------------------------

echo "compare.sh: load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" >&2
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$REPEAT"); do
    r=""
    [ "$REPEAT" -gt 1 ] && r="-r$rep"
    for tr in ${RUN_TRANSPORTS//,/ }; do
        # ucx-<tls>: every program over UCX with UCX_TLS=<tls>,self (ucx_env for strata and
        # MPICH, exported by Open MPI's -x).
        ucx_env=()
        case $tr in
        ucx-*)
            ucx_env=(UCX_TLS="${tr#ucx-},self")
            [ "${tr#ucx-}" = tcp ] && ucx_env+=(UCX_NET_DEVICES=lo)
            ;;
        esac
        if [ $have_strata = 1 ]; then
            flag=()
            [ "$tr" = tcp ] && flag=(--tcp)
            pre=(env)
            [ ${#ucx_env[@]} -gt 0 ] && pre=(env STRATA_COMM_TRANSPORT=ucx "${ucx_env[@]}")
            for c in ${COLLS//,/ }; do
                # -a 3: the maximum over ranks, as the peers report (strata's default is
                # nccl-tests' average).
                run "strata-$tr" "strata-$tr-$c$r" "${pre[@]}" "$STRATA" launch -n 2 --bind-to "$BIND" \
                    "${flag[@]}" -- "$STRATA" bench "$c" -a 3 "${peer_args[@]}"
                # The same over strata_mem_alloc buffers, which peers on the host reach directly.
                [ "$tr" = shm ] && run "strata_mem-$tr" "strata_mem-$tr-$c$r" "$STRATA" launch -n 2 \
                    --bind-to "$BIND" -- "$STRATA" bench "$c" -R 1 -a 3 "${peer_args[@]}"
            done
        fi
        if [ $have_openmpi = 1 ]; then
            mca=()
            # shellcheck disable=SC2054 # "tcp,self" is one MCA value
            [ "$tr" = tcp ] && mca=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
            if [ ${#ucx_env[@]} -gt 0 ]; then
                # Open MPI 4.1 takes pml ucx only on InfiniBand devices (pml_ucx_devices=mlx*)
                # unless told that any device and transport will do.
                mca=(--mca pml ucx --mca pml_ucx_devices any --mca pml_ucx_tls any)
                for kv in "${ucx_env[@]}"; do mca+=(-x "$kv"); done
            fi
            run "openmpi-$tr" "openmpi-$tr$r" "${ompi_env[@]}" "${ompi_run[@]}" "${mca[@]}" \
                "$OUT/bin/peer_openmpi" -C "$COLLS" "${peer_args[@]}"
        fi
        if [ $have_mpich = 1 ]; then
            genv=()
            # shellcheck disable=SC2054 # "tcp,self" is one UCX value
            [ "$tr" = tcp ] && genv=(-genv MPIR_CVAR_NOLOCAL 1 -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES lo)
            if [ ${#ucx_env[@]} -gt 0 ]; then
                genv=(-genv MPIR_CVAR_NOLOCAL 1)
                for kv in "${ucx_env[@]}"; do genv+=(-genv "${kv%%=*}" "${kv#*=}"); done
            fi
            run "mpich-$tr" "mpich-$tr$r" "${mpich_run[@]}" "${genv[@]}" "$OUT/bin/peer_mpich" \
                -C "$COLLS" "${peer_args[@]}"
        fi
    done
    if [ $have_gloo = 1 ]; then
        run "gloo-tcp" "gloo-tcp$r" "$PY" "$here/peer_gloo.py" --nranks 2 -C "$COLLS" "${peer_args[@]}"
    fi
    # The memory-bandwidth floor, in the same rounds as the runs it bounds.
    membw="$(dirname "$STRATA")/bench/strata_membw"
    big=$("$PY" -c 'import sys
def sz(t):
    m = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:].lower(), 1)
    return int(t[:-1] if m > 1 else t) * m
print(",".join(t for t in sys.argv[1].split(",") if sz(t) >= 1 << 20))' "$SIZES")
    if has_transport shm && [[ ",$COLLS," == *",allreduce,"* ]] && [ -n "$big" ]; then
        if [ -x "$membw" ]; then
            run membw "membw$r" "$membw" "$big" 10
        else
            missing membw "no $membw (build the bench targets)"
        fi
    fi
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
echo "compare.sh: load average at end: $load_end" >&2

# ---- report -------------------------------------------------------------------------------------

"$PY" - "$OUT" "$SIZES" "$COLLS" "$RUN_TRANSPORTS" "$ITERS" "$WARMUP" "$REPEAT" "$load_start" \
    "$load_end" "$(nproc)" "$MALLOC_TUNING" <<'EOF'
import json, os, sys

out, sizes_arg, colls_arg, transports_arg, iters, warmup, repeat, load0, load1, ncpu, mt = sys.argv[1:12]
colls = colls_arg.split(",")
transports = [t for t in ("shm", "tcp") if t in transports_arg.split(",")] + \
    [t for t in transports_arg.split(",") if t.startswith("ucx-")]
PEERS = ("openmpi", "mpich", "gloo")
LAT_BELOW = 4096

def parse_size(t):
    t = t.strip()
    if t[-1:] in "bB" and not t[-2:-1].isdigit():
        t = t[:-1]
    mul = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:].lower(), 1)
    return int(t[:-1] if mul > 1 else t) * mul

def load(name):
    """Best run per (collective, size): the lowest time; a failed check in any run sticks."""
    recs, runs = {}, {}
    try:
        with open(os.path.join(out, "raw", name + ".jsonl")) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                key = (r.get("coll"), r.get("size_bytes"))
                runs.setdefault(key, []).append(r)
    except FileNotFoundError:
        pass
    for key, rs in runs.items():
        timed = [r for r in rs if r.get("time_us") is not None]
        best = dict(min(timed, key=lambda r: r["time_us"]) if timed else rs[0])
        if any(r.get("correct") is False for r in rs):
            best["correct"] = False
        best["runs_time_us"] = [r.get("time_us") for r in rs]
        recs[key] = best
    return recs

missing = {}
with open(os.path.join(out, "missing.txt")) as f:
    for line in f:
        k, _, why = line.rstrip("\n").partition("\t")
        missing[k] = why
partial = {}
with open(os.path.join(out, "partial.txt")) as f:
    for line in f:
        k, _, why = line.rstrip("\n").partition("\t")
        partial.setdefault(k, []).append(why)

def run_name(impl, tr):
    return "gloo-tcp" if impl == "gloo" else "%s-%s" % (impl, tr)

def why_missing(impl, tr):
    for k in (run_name(impl, tr), impl):
        if k in missing:
            return missing[k]
    return None

def fmt_bw(r):
    if r is None:
        return "-"
    if r.get("unsupported"):
        return "unsupported"
    s = "%.3f" % r["busbw_gbs"]
    return s + (" FAIL" if r.get("correct") is False else "")

def fmt_lat(r):
    if r is None:
        return "-"
    if r.get("unsupported"):
        return "unsupported"
    s = "%.1fus" % r["time_us"]
    return s + (" FAIL" if r.get("correct") is False else "")

print("load average %s at start, %s at end, %s cores; %s run(s) per program, best shown; malloc %s"
      % (load0, load1, ncpu, repeat, "tuned (MALLOC_MMAP_MAX_=0)" if mt == "1" else "defaults"))
summary = {"nranks": 2, "iters": int(iters), "warmup": int(warmup), "repeat": int(repeat),
           "load_average_start": load0, "load_average_end": load1, "cpus": int(ncpu),
           "malloc_tuning": mt == "1",
           "sizes_requested": sizes_arg,
           "missing": missing, "partial": partial, "tables": {}}
try:
    summary["commands"] = open(os.path.join(out, "commands.txt")).read().splitlines()
except FileNotFoundError:
    pass
strata_bad = 0
for tr, mine in [(t, m) for t in transports for m in ("strata", "strata_mem")
                 if m == "strata" or t == "shm"]:
    data = {impl: load(run_name(impl, tr)) for impl in ("strata", "strata_mem") + PEERS}
    data["strata"] = data[mine]
    for coll in colls:
        sizes = sorted({s for recs in data.values() for (c, s) in recs if c == coll})
        print()
        labels = ["strata"] + [p + ("(tcp)" if p == "gloo" else "") for p in PEERS]
        print("== %s over %s, 2 ranks: busbw GB/s, x = strata/peer (latency rows: us, x = strata/peer time)%s"
              % (coll, tr, "; strata's buffers from strata_mem_alloc (bench -R 1)"
                 if mine == "strata_mem" else ""))
        for impl in (mine,) + PEERS:
            w = why_missing(impl, tr)
            if w:
                print("   %s: missing (%s)" % (impl, w))
            for why in partial.get(run_name(impl, tr), []):
                if coll in why or impl != "strata":
                    print("   %s: partial (%s)" % (impl, why))
        hdr = "%12s %4s %14s" % ("size(B)", "", "strata" if mine == "strata" else "strata(mem)")
        for l in labels[1:]:
            hdr += " %14s %7s" % (l, "x")
        print(hdr)
        rows = []
        for s in sizes:
            st = data["strata"].get((coll, s))
            lat = s < LAT_BELOW
            line = "%12d %4s %14s" % (s, "lat" if lat else "", fmt_lat(st) if lat else fmt_bw(st))
            row = {"size_bytes": s, "strata": st}
            if st is not None and st.get("correct") is False:
                strata_bad += 1
            for p in PEERS:
                r = data[p].get((coll, s))
                row[p] = r
                ratio = None
                ok = r is not None and st is not None and not r.get("unsupported")
                if ok and lat and r["time_us"] > 0:
                    ratio = st["time_us"] / r["time_us"]
                elif ok and not lat and r["busbw_gbs"] > 0:
                    ratio = st["busbw_gbs"] / r["busbw_gbs"]
                row["x_" + p] = ratio
                cell = fmt_lat(r) if lat else fmt_bw(r)
                if r is None and why_missing(p, tr):
                    cell = "missing"
                line += " %14s %7s" % (cell, "%.2f" % ratio if ratio is not None else "-")
            row["kind"] = "latency" if lat else "busbw"
            rows.append(row)
            print(line)
        summary["tables"].setdefault(tr if mine == "strata" else tr + "_mem", {})[coll] = rows

# ---- against the memory bandwidth, and the targets ----
membw = {}
try:
    with open(os.path.join(out, "raw", "membw.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["size"] not in membw or r["floor_us"] < membw[r["size"]]["floor_us"]:
                membw[r["size"]] = r
except (FileNotFoundError, ValueError):
    pass
def strata_time(impl, tr, coll, s):
    r = load(run_name(impl, tr)).get((coll, s))
    return r["time_us"] if r and r.get("time_us") else None
if membw:
    print()
    print("== allreduce over shm against this machine's memory bandwidth: floor = 4 x size at the rate"
          " of 2 threads streaming a += b (best run)")
    print("%12s %12s %12s %14s %7s %14s %7s" % ("size(B)", "stream GB/s", "floor us", "strata(mem) us",
                                                "/floor", "strata us", "/floor"))
    rows = []
    for s in sorted(membw):
        m = membw[s]
        tm, tp = strata_time("strata_mem", "shm", "allreduce", s), strata_time("strata", "shm", "allreduce", s)
        rows.append({"size_bytes": s, "stream_GBps": m["stream_GBps"], "floor_us": m["floor_us"],
                     "strata_mem_us": tm, "strata_us": tp})
        print("%12d %12.2f %12.1f %14s %7s %14s %7s" % (
            s, m["stream_GBps"], m["floor_us"], "%.1f" % tm if tm else "-",
            "%.2f" % (tm / m["floor_us"]) if tm else "-", "%.1f" % tp if tp else "-",
            "%.2f" % (tp / m["floor_us"]) if tp else "-"))
    summary["membw"] = rows

def cell(tr, coll, s, impl):
    r = load(run_name(impl, tr)).get((coll, s))
    return r if r and not r.get("unsupported") and r.get("time_us") else None
targets = []
def target(what, value, goal, met):
    targets.append({"target": what, "value": value, "goal": goal, "met": met})
def bw_ratio(tr, impl, s, peers):
    st = cell(tr, "allreduce", s, impl)
    best = [cell(tr, "allreduce", s, p) for p in peers]
    best = [b for b in best if b]
    if not st or not best:
        return None
    return min(b["time_us"] for b in best) / st["time_us"]
if "allreduce" in colls:
    for s in (64 << 20, 256 << 20):
        if "shm" in transports:
            x = bw_ratio("shm", "strata", s, ("openmpi", "mpich"))
            if x is not None:
                target("shm allreduce %d MiB, malloc buffers: x the better MPI" % (s >> 20),
                       "%.2f" % x, ">= 2", x >= 2)
            m, t = membw.get(s), cell("shm", "allreduce", s, "strata_mem")
            if m and t:
                q = t["time_us"] / m["floor_us"]
                target("shm allreduce %d MiB, strata_mem_alloc buffers: time / bandwidth floor"
                       % (s >> 20), "%.2f" % q, "<= 1.3", q <= 1.3)
        if "tcp" in transports:
            x = bw_ratio("tcp", "strata", s, ("openmpi",))
            if x is not None:
                target("tcp allreduce %d MiB: x Open MPI over TCP" % (s >> 20), "%.2f" % x, ">= 1.3",
                       x >= 1.3)
    if "shm" in transports:
        for s in sorted({k[1] for k in load(run_name("strata", "shm")) if k[0] == "allreduce"}):
            if s > 64 << 10:
                continue
            st, om = cell("shm", "allreduce", s, "strata"), cell("shm", "allreduce", s, "openmpi")
            if st and om:
                q = st["time_us"] / om["time_us"]
                goal = 1.0 if s <= 8 else 1.5
                target("shm allreduce %d B: time / Open MPI's" % s, "%.2f" % q, "<= %.1f" % goal,
                       q <= goal)
if targets:
    print()
    print("== issue 18's targets, 2 ranks, this run")
    for t in targets:
        print("   %-70s %7s  goal %-6s %s" % (t["target"], t["value"], t["goal"],
                                            "met" if t["met"] else "NOT MET"))
    summary["targets"] = targets

path = os.path.join(out, "summary.json")
with open(path, "w") as f:
    json.dump(summary, f, indent=1)
print()
print("summary: %s (raw JSON lines in %s/raw, logs in %s/log)" % (path, out, out))
strata_failed = strata_bad or any(k == "strata" or k.startswith("strata-") for k in missing) \
    or any(k.startswith("strata-") for k in partial)
sys.exit(1 if strata_failed else 0)
EOF
