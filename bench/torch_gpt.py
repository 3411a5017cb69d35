"""The PyTorch twin of strata's GPT (src/model): same architecture, same parameter names and shapes,
so a strata checkpoint loads with load_state_dict and the fixtures/benchmark compare like for like.

Also a minimal safetensors writer/reader with strata's __metadata__ (crc32 of the data), so no
extra Python package is needed (Debian's python3-torch only)."""
import json
import math
import struct
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.C, self.NH = C, NH
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, C, Fd):
        super().__init__()
        self.fc = nn.Linear(C, Fd)
        self.proj = nn.Linear(Fd, C)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH, Fd, eps):
        super().__init__()
        self.ln1 = nn.LayerNorm(C, eps=eps)
        self.attn = Attn(C, NH)
        self.ln2 = nn.LayerNorm(C, eps=eps)
        self.mlp = MLP(C, Fd)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """cfg: dict with vocab, max_seq, n_layer, n_head, d_model, d_ff (0 = 4C), ln_eps, init_std."""

    def __init__(self, cfg):
        super().__init__()
        V, T, C = cfg["vocab"], cfg["max_seq"], cfg["d_model"]
        Fd = cfg.get("d_ff") or 4 * C
        eps, std = cfg.get("ln_eps", 1e-5), cfg.get("init_std", 0.02)
        self.wte = nn.Parameter(torch.randn(V, C) * std)
        self.wpe = nn.Parameter(torch.randn(T, C) * std)
        self.h = nn.ModuleList([Block(C, cfg["n_head"], Fd, eps) for _ in range(cfg["n_layer"])])
        self.lnf = nn.LayerNorm(C, eps=eps)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2 and name not in ("wte", "wpe"):
                s = std / math.sqrt(2 * cfg["n_layer"]) if name.endswith("proj.weight") else std
                nn.init.normal_(p, 0.0, s)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte[idx] + self.wpe[:T]
        for blk in self.h:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.t()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def save_safetensors(path, tensors, config=""):
    """tensors: ordered dict name -> float32 tensor. Writes strata's metadata (format, crc32)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    data = b"".join(blobs)
    header["__metadata__"] = {"format": "strata", "crc32": "%08x" % (zlib.crc32(data) & 0xFFFFFFFF),
                              "step": "0", "config": config, "header_crc32": "00000000"}
    with open(path, "wb") as f:
        f.write(seal_header(header) + data)


def seal_header(header):
    """The 8 length bytes and the padded JSON header, with "header_crc32" set to the crc32 of both
    computed while its own 8 digits read "00000000" (what strata checks before trusting metadata)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    blob = struct.pack("<Q", len(h)) + h
    field = b'"header_crc32":"00000000"'
    assert blob.count(field) == 1
    crc = zlib.crc32(blob) & 0xFFFFFFFF
    return blob.replace(field, b'"header_crc32":"%08x"' % crc)


def load_safetensors(path):
    """Returns (dict name -> float32 tensor, metadata dict); checks strata's crc32 when present."""
    import numpy as np
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    if "crc32" in meta and int(meta["crc32"], 16) != zlib.crc32(data) & 0xFFFFFFFF:
        raise ValueError("%s: crc32 mismatch" % path)
    out = {}
    for name, e in header.items():
        b, en = e["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:en], dtype=np.float32).copy()).view(
            *e["shape"])
    return out, meta
