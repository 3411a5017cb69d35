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


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def norm(cfg, C):
    eps = cfg.get("ln_eps", 1e-5)
    return RMSNorm(C, eps) if cfg.get("norm", "layernorm") == "rmsnorm" else nn.LayerNorm(C, eps=eps)


def rope(x, theta):
    """Rotary embedding of x [B, NH, T, hs], rotate-half pairing (x[i], x[i + hs/2])."""
    T, hs = x.shape[-2], x.shape[-1]
    half = hs // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / hs)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attn(nn.Module):
    def __init__(self, cfg, C, NH):
        super().__init__()
        bias = cfg.get("bias", True)
        self.C, self.NH = C, NH
        self.NKV = cfg.get("n_kv_head") or NH  # grouped-query attention: k/v heads
        self.window = cfg.get("window", 0)
        self.rope = cfg.get("pos", "learned") == "rope"
        self.theta = cfg.get("rope_theta") or 10000.0
        KV = C // NH * self.NKV
        if self.NKV == NH:
            self.qkv = nn.Linear(C, 3 * C, bias=bias)
        else:  # q, and k | v
            self.q = nn.Linear(C, C, bias=bias)
            self.kv = nn.Linear(C, 2 * KV, bias=bias)
        self.proj = nn.Linear(C, C, bias=bias)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.NH
        if self.NKV == self.NH:
            q, k, v = self.qkv(x).split(C, dim=2)
        else:
            q = self.q(x)
            k, v = self.kv(x).split(hs * self.NKV, dim=2)
        q = q.view(B, T, self.NH, hs).transpose(1, 2)
        k = k.view(B, T, self.NKV, hs).transpose(1, 2)
        v = v.view(B, T, self.NKV, hs).transpose(1, 2)
        if self.rope:
            q, k = rope(q, self.theta), rope(k, self.theta)
        if self.NKV != self.NH:  # each k/v head serves NH / NKV consecutive query heads
            k = k.repeat_interleave(self.NH // self.NKV, dim=1)
            v = v.repeat_interleave(self.NH // self.NKV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        if self.window > 0:  # keys (t - window, t] only
            mask |= torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-self.window)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg, C, Fd):
        super().__init__()
        bias = cfg.get("bias", True)
        self.fc = nn.Linear(C, Fd, bias=bias)
        self.proj = nn.Linear(Fd, C, bias=bias)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class SwiGLU(nn.Module):
    def __init__(self, cfg, C, Fd):
        super().__init__()
        bias = cfg.get("bias", True)
        self.w1 = nn.Linear(C, Fd, bias=bias)  # gate
        self.w3 = nn.Linear(C, Fd, bias=bias)  # up
        self.w2 = nn.Linear(Fd, C, bias=bias)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg, C, NH, Fd):
        super().__init__()
        self.parallel = cfg.get("parallel", False)
        self.ln1 = norm(cfg, C)
        self.attn = Attn(cfg, C, NH)
        if not self.parallel:
            self.ln2 = norm(cfg, C)
        self.mlp = SwiGLU(cfg, C, Fd) if cfg.get("mlp", "gelu") == "swiglu" else MLP(cfg, C, Fd)

    def forward(self, x):
        if self.parallel:  # GPT-J / PaLM: one norm, both branches added to the residual
            h = self.ln1(x)
            return x + self.attn(h) + self.mlp(h)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """cfg: dict with vocab, max_seq, n_layer, n_head, d_model, d_ff (0 = 4C), ln_eps, init_std, and
    the options of strata_gpt_config_t: parallel, window, norm (layernorm|rmsnorm), mlp
    (gelu|swiglu), pos (learned|rope), bias, rope_theta, n_kv_head, tied (strata's defaults when
    absent)."""

    def __init__(self, cfg):
        super().__init__()
        V, T, C = cfg["vocab"], cfg["max_seq"], cfg["d_model"]
        Fd = cfg.get("d_ff") or 4 * C
        std = cfg.get("init_std", 0.02)
        self.wte = nn.Parameter(torch.randn(V, C) * std)
        self.learned_pos = cfg.get("pos", "learned") == "learned"
        if self.learned_pos:
            self.wpe = nn.Parameter(torch.randn(T, C) * std)
        self.h = nn.ModuleList([Block(cfg, C, cfg["n_head"], Fd) for _ in range(cfg["n_layer"])])
        self.lnf = norm(cfg, C)
        self.tied = cfg.get("tied", True)
        if not self.tied:
            self.lm_head = nn.Linear(C, V, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2 and name not in ("wte", "wpe"):
                resid = name.endswith("proj.weight") or name.endswith("w2.weight")
                nn.init.normal_(p, 0.0, std / math.sqrt(2 * cfg["n_layer"]) if resid else std)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte[idx]
        if self.learned_pos:
            x = x + self.wpe[:T]
        for blk in self.h:
            x = blk(x)
        logits = self.lnf(x) @ (self.wte if self.tied else self.lm_head.weight).t()
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
