"""Start-up probe for torch.distributed with Gloo: each rank times init_process_group (TCPStore
rendezvous + Gloo full-mesh connect) plus its first barrier; rank 0 prints the slowest rank's time as
one JSON line, like bench/init_probe.c. Usage: /usr/bin/python3 bench/peer_gloo_init.py N PORT"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, n, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    dist.init_process_group("gloo", rank=rank, world_size=n)
    dist.barrier()
    mine = torch.tensor([time.monotonic() - t0], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if rank == 0:
        out.put(float(mine[0]))
    dist.destroy_process_group()


if __name__ == "__main__":
    n, port = int(sys.argv[1]), int(sys.argv[2])
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=rank_main, args=(r, n, port, q)) for r in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit(1)
    print(json.dumps({"impl": "gloo", "nranks": n, "init_s": round(q.get(), 4)}))
