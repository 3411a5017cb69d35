#!/usr/bin/python3
"""peer_gloo: the measurement loop of `strata bench`, for torch.distributed with the Gloo backend.

bench/compare.sh runs it next to strata, Open MPI and MPICH. Two ways to start it:

  /usr/bin/python3 bench/peer_gloo.py --nranks 2 -C allreduce --sizes 8,1M --json
      spawns the ranks itself (torch.multiprocessing) on a free port of 127.0.0.1;
  strata launch -n 2 -- /usr/bin/python3 bench/peer_gloo.py ...
      (or torchrun) uses RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT from the launcher.

Same definitions as strata bench and nccl-tests: SIZE is the collective's largest buffer (for
allgather and reduce_scatter all nranks blocks), float32 tensors, sum; warm-up, barrier, ITERS calls
back to back, time = the maximum over ranks of the mean; algbw = size / time; busbw = algbw * 2(n-1)/n
for allreduce, (n-1)/n for allgather and reduce_scatter, 1 for bcast. With -c 1 inputs are small
integers ((rank + i) % 7) and outputs are compared exactly.

Collectives: dist.all_reduce; dist.all_gather_into_tensor, or dist.all_gather into views of one
tensor where Gloo lacks the former (the JSON "algo" says which); dist.reduce_scatter_tensor (Gloo in
torch 1.13 does not implement it: the line then says "unsupported": true and carries no numbers, it is
never emulated); dist.broadcast from rank 0. Each rank uses one intra-op thread, as the ranks of the
other peers are single-threaded. Gloo always runs over TCP (GLOO_SOCKET_IFNAME defaults to lo here).
"""
import argparse
import json
import os
import socket
import sys
import time

COLLS = ("allreduce", "allgather", "reduce_scatter", "bcast")


def parse_size(text):
    t = text.strip()
    mul = 1
    if t[-1:] in "bB" and len(t) > 1 and not t[-2:-1].isdigit():
        t = t[:-1]
    if t[-1:] in "kK":
        mul, t = 1 << 10, t[:-1]
    elif t[-1:] in "mM":
        mul, t = 1 << 20, t[:-1]
    elif t[-1:] in "gG":
        mul, t = 1 << 30, t[:-1]
    v = int(t)
    if v < 0:
        raise ValueError(text)
    return v * mul


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-C", dest="colls", default="allreduce",
                   help="comma list of " + ",".join(COLLS))
    p.add_argument("--sizes", default=None, help="comma list of sizes (8,64K,1M)")
    p.add_argument("-b", dest="min_bytes", default="8")
    p.add_argument("-e", dest="max_bytes", default="64M")
    p.add_argument("-f", dest="factor", type=int, default=2)
    p.add_argument("-n", dest="iters", type=int, default=20)
    p.add_argument("-w", dest="warmup", type=int, default=5)
    p.add_argument("-c", dest="check", type=int, default=1, choices=(0, 1))
    p.add_argument("--json", action="store_true")
    p.add_argument("--nranks", type=int, default=2,
                   help="ranks to spawn when not started by a launcher (default 2)")
    a = p.parse_args(argv)
    colls = []
    for c in a.colls.split(","):
        c = "bcast" if c == "broadcast" else c
        if c not in COLLS:
            p.error("unknown collective %r" % c)
        colls.append(c)
    a.colls = colls
    if a.sizes:
        a.sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    else:
        lo, hi, f = parse_size(a.min_bytes), parse_size(a.max_bytes), max(2, a.factor)
        a.sizes = []
        while lo <= hi:
            a.sizes.append(lo)
            lo *= f
    if a.iters < 1 or a.warmup < 0:
        p.error("-n must be >= 1 and -w >= 0")
    return a


def shape(coll, nbytes, nranks):
    """(param, send elements, recv elements, total elements), as in strata bench."""
    elems = nbytes // 4
    blk = elems // nranks
    if coll == "allgather":
        return blk, blk, blk * nranks, blk * nranks
    if coll == "reduce_scatter":
        return blk, blk * nranks, blk, blk * nranks
    return elems, elems, elems, elems


def busbw_factor(coll, n):
    if coll == "allreduce":
        return 2.0 * (n - 1) / n
    if coll == "bcast":
        return 1.0
    return (n - 1) / n


def run_rank(rank, nranks, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=nranks)

    def gather_impl():
        """Probe all_gather_into_tensor once; fall back to all_gather into views."""
        out = torch.zeros(nranks)
        try:
            dist.all_gather_into_tensor(out, torch.ones(1))
            return "all_gather_into_tensor"
        except (RuntimeError, AttributeError, NotImplementedError):
            return "all_gather"

    def rs_supported():
        try:
            dist.reduce_scatter_tensor(torch.zeros(1), torch.ones(nranks))
            return True
        except (RuntimeError, AttributeError, NotImplementedError):
            return False

    gather_algo = gather_impl()
    rs_ok = "reduce_scatter" not in args.colls or rs_supported()
    dist.barrier()

    def expect_sum(idx):
        s = torch.zeros_like(idx, dtype=torch.float64)
        for r in range(nranks):
            s += (idx + r) % 7
        return s.float()

    failures = 0
    for coll in args.colls:
        for nbytes in args.sizes:
            param, ns, nr, total = shape(coll, nbytes, nranks)
            rec = {"impl": "gloo", "coll": coll, "size_bytes": total * 4, "count": total,
                   "dtype": "f32", "op": "sum" if coll in ("allreduce", "reduce_scatter") else "none",
                   "root": 0 if coll == "bcast" else -1, "nranks": nranks, "iters": args.iters}
            if coll == "reduce_scatter" and not rs_ok:
                rec.update(algo="reduce_scatter_tensor", unsupported=True, time_us=None,
                           algbw_gbs=None, busbw_gbs=None, correct=None)
                if rank == 0:
                    emit(args, rec)
                continue
            send = torch.zeros(ns, dtype=torch.float32)
            recv = torch.zeros(nr, dtype=torch.float32)
            views = list(recv.split(param)) if coll == "allgather" and param > 0 else None

            def fill():
                recv.fill_(-1.0)
                if coll == "bcast":
                    if rank == 0:
                        torch.remainder(torch.arange(nr, dtype=torch.float32), 113, out=recv)
                elif coll == "allgather":
                    send.copy_(torch.remainder(torch.arange(ns, dtype=torch.float64) + rank * 13,
                                               113).float())
                else:
                    send.copy_(torch.remainder(torch.arange(ns, dtype=torch.float64) + rank, 7)
                               .float())

            def once():
                if coll == "allreduce":
                    # all_reduce is in place; copying the input in keeps it out of place like the
                    # other peers would cost a copy per call, so reduce the recv buffer in place.
                    dist.all_reduce(recv)
                elif coll == "allgather":
                    if gather_algo == "all_gather_into_tensor":
                        dist.all_gather_into_tensor(recv, send)
                    elif views:
                        dist.all_gather(views, send)
                elif coll == "reduce_scatter":
                    dist.reduce_scatter_tensor(recv, send)
                else:
                    dist.broadcast(recv, 0)

            fill()
            if coll == "allreduce":
                recv.copy_(send)
            for _ in range(args.warmup):
                once()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                once()
            mine = (time.perf_counter() - t0) * 1e6 / args.iters
            t = torch.tensor([mine], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            us = float(t[0])
            correct = None
            if args.check:
                fill()
                if coll == "allreduce":
                    recv.copy_(send)
                once()
                if coll == "bcast":
                    want = torch.remainder(torch.arange(nr, dtype=torch.float32), 113)
                elif coll == "allgather":
                    k = torch.arange(nr, dtype=torch.int64)
                    want = torch.remainder((k // max(param, 1)) * 13 + k % max(param, 1), 113).float()
                elif coll == "reduce_scatter":
                    want = expect_sum(torch.arange(nr, dtype=torch.int64) + rank * param)
                else:
                    want = expect_sum(torch.arange(nr, dtype=torch.int64))
                ok = torch.tensor([1 if torch.equal(recv, want) else 0], dtype=torch.int32)
                dist.all_reduce(ok, op=dist.ReduceOp.MIN)
                correct = bool(ok[0])
                failures += 0 if correct else 1
            algbw = total * 4 / (us * 1e3) if us > 0 else 0.0
            rec.update(algo=gather_algo if coll == "allgather" else "gloo-default",
                       time_us=round(us, 3), algbw_gbs=round(algbw, 4),
                       busbw_gbs=round(algbw * busbw_factor(coll, nranks), 4), correct=correct)
            if rank == 0:
                emit(args, rec)
    dist.barrier()
    dist.destroy_process_group()
    return failures


def emit(args, rec):
    if args.json:
        print(json.dumps(rec, separators=(",", ":")), flush=True)
    elif rec.get("unsupported"):
        print("  %-14s %12d %12d %11s   unsupported by gloo" % (rec["coll"], rec["size_bytes"],
                                                                rec["count"], "-"), flush=True)
    else:
        ok = "-" if rec["correct"] is None else "ok" if rec["correct"] else "FAIL"
        print("  %-14s %12d %12d %11.2f %9.3f %9.3f %8s" % (
            rec["coll"], rec["size_bytes"], rec["count"], rec["time_us"], rec["algbw_gbs"],
            rec["busbw_gbs"], ok), flush=True)


def spawned(rank, nranks, args):
    if run_rank(rank, nranks, args):
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    args = parse_args(argv)
    if not args.json:
        print("# peer_gloo: float32 sum, iters %d, warmup %d" % (args.iters, args.warmup))
        print("# %-14s %12s %12s %11s %9s %9s %8s" % ("coll", "size(B)", "count", "time(us)",
                                                       "algbw", "busbw", "correct"), flush=True)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return 1 if run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args) else 0
    import torch.multiprocessing as mp
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    try:
        mp.spawn(spawned, args=(args.nranks, args), nprocs=args.nranks, join=True)
    except Exception as e:  # a rank failed: mp.spawn says which
        print("peer_gloo: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
