#!/usr/bin/python3
"""PyTorch peer of bench/train_vs_torch.sh: the same GPT (bench/torch_gpt.py), batch, optimizer
(AdamW, fp32 master weights) and thread count as `strata train`, on the same corpus, in the same
precision: --precision bf16 runs the forward under torch's CPU autocast to bfloat16 (its matrix
products in bf16 through oneDNN, the rest and the weights in fp32), as `strata train --precision
bf16` does. Prints tokens/s averaged over the timed steps (after warm-up). Run with Debian's
python3-torch (/usr/bin/python3)."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch_gpt import GPT  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--heads", type=int, default=8)
ap.add_argument("--dim", type=int, default=256)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--warmup-steps", type=int, default=3)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--data", default="data/corpus/strata_tales.txt")
ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
a = ap.parse_args()

torch.set_num_threads(a.threads)
torch.manual_seed(1)
cfg = {"vocab": 256, "max_seq": a.seq, "n_layer": a.layers, "n_head": a.heads, "d_model": a.dim}
model = GPT(cfg)
decay = [p for n, p in model.named_parameters() if p.dim() == 2]
other = [p for n, p in model.named_parameters() if p.dim() != 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other,
                         "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
data = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8).long()
g = torch.Generator().manual_seed(1)
times = []
for step in range(a.steps):
    t0 = time.perf_counter()
    ix = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
    x = torch.stack([data[i:i + a.seq] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + a.seq] for i in ix])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
timed = times[a.warmup_steps:]
tps = a.batch * a.seq * len(timed) / sum(timed)
print("torch tokens/s: %.1f (loss %.4f, %d params)" % (tps, loss.item(),
      sum(p.numel() for p in model.parameters())))
