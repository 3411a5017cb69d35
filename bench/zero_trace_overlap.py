#!/usr/bin/env python3
"""Fraction of communication hidden behind compute, from strata Chrome traces (standard library only).

Communication = the asynchronous spans (ph b/e, matched by cat and id): a non-blocking collective from
issue to observed completion. Compute = the synchronous spans (ph B/E) of category "compute".
hidden = |union(comm) & union(compute)| / |union(comm)|, per rank, then over all ranks' totals.

usage: zero_trace_overlap.py TRACE.json [TRACE.json ...]
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


def spans(path):
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    comm, comp, open_async, stack = [], [], {}, []
    for e in ev:
        ph, ts = e["ph"], float(e["ts"])
        if ph == "b":
            open_async[(e["cat"], e["id"])] = ts
        elif ph == "e":
            t0 = open_async.pop((e["cat"], e["id"]), None)
            if t0 is not None:
                comm.append((t0, ts))
        elif ph == "B":
            stack.append((e["cat"], ts))
        elif ph == "E" and stack:
            cat, t0 = stack.pop()
            if cat == "compute":
                comp.append((t0, ts))
    return union(comm), union(comp)


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    tot_comm = tot_hidden = 0.0
    for path in sys.argv[1:]:
        comm, comp = spans(path)
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
