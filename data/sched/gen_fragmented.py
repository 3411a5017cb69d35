#!/usr/bin/env python3
"""Writes h100-24k-fragmented.state: a fragmented state of the h100-roce-24k preset (hosts
node00000..node03071, racks of 2 hosts, zones of 384 hosts). Zone 0 is nearly full (10 free hosts),
zones 1-7 hold runs of busy hosts left by earlier jobs, 12 hosts are down. Seeded: same file
every run. Usage: python3 data/sched/gen_fragmented.py > data/sched/h100-24k-fragmented.state"""
import random

r = random.Random(7)
busy, failed = set(), set()
z0 = list(range(384))
busy |= set(z0) - set(r.sample(z0, 10))
for z in range(1, 8):
    h = z * 384
    while h < (z + 1) * 384:
        run = r.choice([1, 2, 3, 4, 6, 8, 12, 16])
        if r.random() < 0.13:
            busy.update(range(h, min(h + run, (z + 1) * 384)))
        h += run
for k in r.sample(range(3072), 12):
    busy.discard(k)
    failed.add(k)


def ranges(s):
    s, out, i = sorted(s), [], 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append("%05d" % s[i] if i == j else "%05d-%05d" % (s[i], s[j]))
        i = j + 1
    return out


print("# Host states for the h100-roce-24k preset (data/sched/gen_fragmented.py): zone 0 nearly")
print("# full, zones 1-7 with runs of busy hosts, 12 hosts down. %d busy, %d failed, %d free."
      % (len(busy), len(failed), 3072 - len(busy) - len(failed)))
rb = ranges(busy)
for i in range(0, len(rb), 16):
    print("node[%s] busy" % ",".join(rb[i:i + 16]))
print("node[%s] failed" % ",".join(ranges(failed)))
