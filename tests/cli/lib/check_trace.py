#!/usr/bin/env python3
"""Checks Chrome traces written by strata (strata/trace.h) and their merge (strata trace merge).

usage: check_trace.py MERGED.json RANK.json...

Each rank's file: on the common clock (otherData.clock), the process named "rank <pid>" with a sort
index, every thread that recorded a span named; every B closed by an E on its thread and every b by
an e of the same (cat, id), and no end without its begin; every collective span ("coll") carries its
size in bytes and either its algorithm, group size, communicator and sequence number or its peer.
The merged file: every rank's events, the first at time 0, and each collective whose result
depends on every rank (allreduce, allgather, reduce_scatter, barrier, alltoall) found on all ranks
of its communicator has spans that overlap in time (no rank finishes before the last one started),
which only holds when the files share a clock. Prints one line per check; exits 1 on a failure.
"""
import json
import sys

failed = False


def check(name, ok, detail=""):
    global failed
    print("%-62s %s" % (name, "ok" if ok else "FAIL " + detail))
    failed |= not ok


def load(path):
    with open(path) as f:
        return json.load(f)


def spans(events):
    """Pairs begins with ends; returns (spans, problems). A span: (ph, begin event, end event)."""
    out, problems, stacks, open_async = [], [], {}, {}
    for e in events:
        ph = e.get("ph")
        if ph == "B":
            stacks.setdefault((e["pid"], e["tid"]), []).append(e)
        elif ph == "E":
            st = stacks.get((e["pid"], e["tid"]))
            if not st:
                problems.append("E without B: %s" % e["name"])
            else:
                out.append(("B", st.pop(), e))
        elif ph == "b":
            open_async[(e["pid"], e["cat"], e["id"])] = e
        elif ph == "e":
            b = open_async.pop((e["pid"], e["cat"], e["id"]), None)
            if b is None:
                problems.append("e without b: %s" % e["name"])
            else:
                out.append(("b", b, e))
    problems += ["B without E: %s" % b["name"] for st in stacks.values() for b in st]
    problems += ["b without e: %s" % b["name"] for b in open_async.values()]
    return out, problems


def check_rank_file(path):
    doc = load(path)
    ev = doc["traceEvents"]
    pid = doc.get("otherData", {}).get("pid")
    check("%s: on the common clock" % path, doc.get("otherData", {}).get("clock") == "realtime_us")
    meta = {(e["name"], e["tid"]): e["args"] for e in ev if e.get("ph") == "M"}
    check("%s: process named rank %s" % (path, pid),
          meta.get(("process_name", 0), {}).get("name") == "rank %s" % pid and
          meta.get(("process_sort_index", 0), {}).get("sort_index") == pid)
    tids = {e["tid"] for e in ev if e.get("ph") in "BEbe"}
    unnamed = [t for t in tids if not meta.get(("thread_name", t), {}).get("name")]
    check("%s: every recording thread named" % path, tids and not unnamed, str(unnamed))
    sp, problems = spans(ev)
    check("%s: every begin has its end" % path, not problems, "; ".join(problems[:5]))
    coll = [b for ph, b, _ in sp if ph == "b" and b["cat"] == "coll"]
    bad = []
    for b in coll:
        a = b.get("args", {})
        group = isinstance(a.get("algo"), str) and a["algo"] and all(
            isinstance(a.get(k), int) for k in ("ranks", "comm", "seq"))
        if not isinstance(a.get("bytes"), int) or not (group or isinstance(a.get("peer"), int)):
            bad.append("%s %s" % (b["name"], a))
    check("%s: %d collective spans with bytes and algorithm" % (path, len(coll)),
          coll and not bad and any(b["args"]["bytes"] > 0 for b in coll), "; ".join(bad[:3]))


def check_merged(path, nranks):
    ev = load(path)["traceEvents"]
    pids = {e["pid"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    check("merged: every rank's process", pids == set(range(nranks)), str(pids))
    check("merged: the job starts at 0", min(float(e["ts"]) for e in ev if "ts" in e) == 0)
    sp, problems = spans(ev)
    check("merged: every begin has its end", not problems, "; ".join(problems[:5]))
    groups = {}
    for ph, b, e in sp:
        a = b.get("args", {})
        if (ph == "b" and b["cat"] == "coll" and "seq" in a and not e.get("args", {}).get(
                "closed_at_close") and b["name"] in
                ("allreduce", "allgather", "reduce_scatter", "barrier", "alltoall")):
            groups.setdefault((a["comm"], a["seq"], b["name"], a["ranks"]), []).append(
                (float(b["ts"]), float(e["ts"])))
    full = {k: v for k, v in groups.items() if len(v) == k[3] and k[3] > 1}
    apart = ["%s #%d: last begin %.3f > first end %.3f" % (k[2], k[1], max(s for s, _ in v),
                                                          min(t for _, t in v))
             for k, v in full.items() if max(s for s, _ in v) > min(t for _, t in v)]
    check("merged: %d collectives overlap across their ranks" % len(full), full and not apart,
          "; ".join(apart[:3]))


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for p in sys.argv[2:]:
        check_rank_file(p)
    check_merged(sys.argv[1], len(sys.argv) - 2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
