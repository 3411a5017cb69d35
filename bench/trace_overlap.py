#!/usr/bin/env python3
"""Fraction of communication hidden behind compute, from strata Chrome traces (standard library only).

Communication = the asynchronous spans (ph b/e, matched by cat and id): a non-blocking collective from
issue to observed completion (a span the trace's close ended, "closed_at_close", is left out). Compute = the synchronous spans (ph B/E) of category "compute", less
the synchronous spans of category "comm" inside them (a wait for a collective, such as "tp.wait",
nested in a layer's span is not computation).
hidden = |union(comm) & union(compute)| / |union(comm)|, per rank, then over all ranks' totals.
--only PREFIX counts only the communication spans whose name starts with PREFIX (e.g. "tp." for the
tensor-parallel collectives, "zero." for the ZeRO engine's).

usage: trace_overlap.py [--only PREFIX] TRACE.json [TRACE.json ...]
"""
import json
import sys


def union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def length(iv):
    return sum(b - a for a, b in iv)


def intersect(x, y):
    i = j = 0
    tot = 0.0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            tot += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return tot


def subtract(x, y):
    """x minus y, both unions."""
    out, j = [], 0
    for a, b in x:
        while j < len(y) and y[j][1] <= a:
            j += 1
        k, cur = j, a
        while k < len(y) and y[k][0] < b:
            if y[k][0] > cur:
                out.append([cur, y[k][0]])
            cur = max(cur, y[k][1])
            k += 1
        if cur < b:
            out.append([cur, b])
    return out


def spans(path, only=""):
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    comm, comp, waits, open_async, stack = [], [], [], {}, []
    for e in ev:
        if "ts" not in e:  # metadata (process and thread names)
            continue
        ph, ts = e["ph"], float(e["ts"])
        # A span still open when the trace closed is ended there: it did not complete in the trace.
        unfinished = e.get("args", {}).get("closed_at_close", False)
        if ph == "b":
            if e.get("name", "").startswith(only):
                open_async[(e["cat"], e["id"])] = ts
        elif ph == "e":
            t0 = open_async.pop((e["cat"], e["id"]), None)
            if t0 is not None and not unfinished:
                comm.append((t0, ts))
        elif ph == "B":
            stack.append((e["cat"], ts))
        elif ph == "E" and stack:
            cat, t0 = stack.pop()
            if unfinished:
                pass
            elif cat == "compute":
                comp.append((t0, ts))
            elif cat == "comm":
                waits.append((t0, ts))
    return union(comm), subtract(union(comp), union(waits))


def main():
    args, only = sys.argv[1:], ""
    if len(args) >= 2 and args[0] == "--only":
        only, args = args[1], args[2:]
    if not args:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    tot_comm = tot_hidden = 0.0
    for path in args:
        comm, comp = spans(path, only)
        c, h = length(comm), intersect(comm, comp)
        tot_comm += c
        tot_hidden += h
        print("%s: comm %.1f ms, compute %.1f ms, hidden %.1f ms (%.1f%%)"
              % (path, c / 1e3, length(comp) / 1e3, h / 1e3, 100.0 * h / c if c else 0.0))
    frac = tot_hidden / tot_comm if tot_comm else 0.0
    print("hidden fraction: %.3f" % frac)
    return 0


if __name__ == "__main__":
    sys.exit(main())
