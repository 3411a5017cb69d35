#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets that are not copies of files under data/: small
safetensors checkpoints in strata's format (corpus/ckpt/, and the regression inputs of
regressions/ckpt/, rebuilt from what each is about) and store protocol sessions
(corpus/store/, the script format of fuzz_store.c; corpus/store_client/, the store's replies). Deterministic; the output is committed.
    python3 tests/fuzz/make_seeds.py"""
import json
import os
import struct
import zlib

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data, kind="corpus"):
    d = os.path.join(here, kind, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- checkpoints ---------------------------------------------------------------------------------

MODEL = {"vocab": 16, "max_seq": 4, "n_layer": 1, "n_head": 1, "d_model": 4, "d_ff": 8,
         "ln_eps": 1e-5, "init_std": 0.02}


def gpt_tensors(c):
    """strata's tensor table (names and shapes, in arena order) for config c."""
    V, T, C, F = c["vocab"], c["max_seq"], c["d_model"], c["d_ff"]
    out = [("wte", [V, C]), ("wpe", [T, C])]
    for i in range(c["n_layer"]):
        h = "h.%d." % i
        out += [(h + "ln1.weight", [C]), (h + "ln1.bias", [C]),
                (h + "attn.qkv.weight", [3 * C, C]), (h + "attn.qkv.bias", [3 * C]),
                (h + "attn.proj.weight", [C, C]), (h + "attn.proj.bias", [C]),
                (h + "ln2.weight", [C]), (h + "ln2.bias", [C]),
                (h + "mlp.fc.weight", [F, C]), (h + "mlp.fc.bias", [F]),
                (h + "mlp.proj.weight", [C, F]), (h + "mlp.proj.bias", [C])]
    return out + [("lnf.weight", [C]), ("lnf.bias", [C])]


def count(shape):
    n = 1
    for s in shape:
        n *= s
    return n


RUN_ID = "5eed5eed5eed5eed"


def safetensors(tensors, meta, shapes=None):
    """tensors: list of (name, shape, floats); shapes: name -> a shape to write instead.
    The header is sealed as strata_ckpt_write seals it (see seal_header in bench/torch_gpt.py)."""
    header, blob = {}, b""
    for name, shape, vals in tensors:
        data = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": (shapes or {}).get(name, shape),
                        "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    md = {"format": "strata", "crc32": "%08x" % zlib.crc32(blob)}
    md.update(meta)
    md["header_crc32"] = "00000000"
    header["__metadata__"] = md
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    sealed = struct.pack("<Q", len(h)) + h
    field = b'"header_crc32":"00000000"'
    assert sealed.count(field) == 1
    sealed = sealed.replace(field, b'"header_crc32":"%08x"' % zlib.crc32(sealed))
    return sealed + blob


def values(n, seed):
    return [((i * 37 + seed * 11) % 23 - 11) / 40.0 for i in range(n)]


def ckpt_seeds():
    table = gpt_tensors(MODEL)
    P = sum(count(s) for _, s in table)
    cfg = json.dumps({"model": MODEL, "batch": 1, "seq": 4, "steps": 2})
    meta = {"step": "1", "seed": "1", "data_pos": "2", "rank": "0", "nranks": "1",
            "shard_offset": "0", "shard_count": str(P), "run_id": RUN_ID, "config": cfg}
    params = [(n, s, values(count(s), i)) for i, (n, s) in enumerate(table)]
    write("ckpt", "unsharded.safetensors", safetensors(params, meta))
    state = [("optim.m", [P], values(P, 50)), ("optim.v", [P], [abs(v) for v in values(P, 51)])]
    write("ckpt", "unsharded_state.safetensors", safetensors(params + state, meta))
    # A one-rank ZeRO run: the whole arena as one range, with its optimizer state.
    flat = [v for _, _, vals in params for v in vals]
    shard = [("params@0", [P], flat), ("optim.m@0", [P], values(P, 52)),
             ("optim.v@0", [P], [abs(v) for v in values(P, 53)])]
    write("ckpt", "shard.safetensors", safetensors(shard, meta))
    write("ckpt", "no_config.safetensors", safetensors(params[:2], {"step": "3"}))

    # Regression inputs (docs/fuzzing.md, "What fuzzing found").
    # Finite weights of up to 1e30 pass every check of the file; the forward pass overflows them to
    # inf and inf - inf = NaN, which reached st_exp's float-to-int conversion.
    huge = [v * 4e30 for v in flat]
    write("ckpt", "nan_weight_st_exp.safetensors",
          safetensors([("params@0", [P], huge)] + shard[1:], meta), "regressions")
    # A shape whose element count wraps size_t (2^32 x 2^32 = 0 mod 2^64; each within 2^53) over an
    # empty data range.
    write("ckpt", "shape_count_wraps.safetensors",
          safetensors([("big", [0], [])], {"step": "1"}, {"big": [1 << 32, 1 << 32]}),
          "regressions")


# ---- store sessions ------------------------------------------------------------------------------

MAGIC, VERSION = 0x31525453, 2
HELLO, SET, GET, ADD, WAIT, CANCEL, ABORT, BYE = range(1, 9)


def frame(kind, body):
    return struct.pack("<IB", len(body) + 1, kind) + body


def s(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def hello(rid, rank, secret="fuzz"):
    return frame(HELLO, struct.pack("<IIIiI", rid, MAGIC, VERSION, rank, 1000 + rank) +
                 s(secret) + s("host%d" % rank) + s("rack0/host%d" % rank))


def rec(client, action, data):
    return struct.pack("<BH", client + 4 * action, len(data)) + data


def store_seeds():
    write("store", "set_get", rec(0, 0, hello(1, 0) + frame(SET, struct.pack("<I", 2) + s("k") +
                                                      b"value") +
                                  frame(GET, struct.pack("<I", 3) + s("k")) +
                                  frame(BYE, struct.pack("<I", 4))))
    # Client 1 parks a GET and a WAIT, client 0 sets one key, adds to another, then dies.
    write("store", "park_and_die",
          rec(1, 0, hello(1, 1) + frame(GET, struct.pack("<I", 2) + s("addr0")) +
              frame(WAIT, struct.pack("<II", 3, 2) + s("addr0") + s("count"))) +
          rec(0, 0, hello(1, 0) + frame(SET, struct.pack("<I", 2) + s("addr0") + b"1.2.3.4") +
              frame(ADD, struct.pack("<I", 3) + s("count") + struct.pack("<q", 5))) +
          rec(1, 0, frame(CANCEL, struct.pack("<I", 3))) +
          rec(0, 2, b"") +
          rec(2, 0, hello(1, -1) + frame(ABORT, struct.pack("<I", 2) + b"operator abort")))
    write("store", "wrong_secret", rec(0, 0, hello(1, 0, "nope")) + rec(1, 0, hello(1, 1)))
    write("store", "before_hello", rec(0, 0, frame(GET, struct.pack("<I", 1) + s("k"))))
    write("store", "half_close", rec(0, 3, hello(1, 2) + frame(GET, struct.pack("<I", 2) + s("x"))))


def answer(kind, rid, payload=b""):
    return frame(kind, struct.pack("<I", rid) + payload)


def notice(rank, text):
    return frame(NOTICE, struct.pack("<i", rank) + text.encode())


OK, ERR, NOTICE, CANCELLED = 64, 65, 66, 67


def store_client_seeds():
    """The store's side of fuzz_store_client.c's conversation (request ids 1 to 6)."""
    write("store_client", "all_ok", answer(OK, 1) + answer(OK, 2, b"10.0.0.1:4000") +
          answer(OK, 3, struct.pack("<q", 7)) + answer(OK, 4) + answer(OK, 5) + answer(OK, 6))
    write("store_client", "refused", answer(ERR, 1, b"wrong secret (check STRATA_SECRET)"))
    write("store_client", "notice_mid_get", answer(OK, 1) +
          notice(2, "rank 2 (host h pid 9) failed: killed") + answer(CANCELLED, 2) +
          answer(OK, 6))
    write("store_client", "late_answers", answer(OK, 1) + answer(OK, 9, b"stale") +
          answer(ERR, 2, b"empty key") + answer(OK, 3, b"short") + answer(OK, 4))


# ---- pool datagrams (fuzz_pool.c: u16 length, u8 mode, datagram) --------------------------------

def pool_dgram(op, token=0, flow=1, seq=0, addr=0, length=0, aux=0, dtype=0, flags=0, hops=b"",
               nhops=0, payload=b""):
    return (struct.pack("<IBBBBQIIQIIIHBB", 0x4c505453, op, dtype, flags, nhops, token, flow, seq,
                        addr, length, aux, 0, 0, 0, 1) + hops + payload)


def pool_rec(dgram, with_token=True):
    return struct.pack("<HB", len(dgram), 1 if with_token else 0) + dgram


def pool_seeds():
    READ, WRITE, ADD, REDUCE, STATS = 5, 7, 8, 10, 14
    floats = struct.pack("<16f", *[float(i) for i in range(16)])
    write("pool", "write_read_add",
          pool_rec(pool_dgram(WRITE, length=64, payload=floats)) +
          pool_rec(pool_dgram(ADD, seq=1, length=64, dtype=1, payload=floats)) +
          pool_rec(pool_dgram(ADD, seq=1, length=64, dtype=1, payload=floats)) +
          pool_rec(pool_dgram(READ, flow=2, length=64)) + pool_rec(pool_dgram(STATS, flow=3)))
    hop = struct.pack("<IHHQQ", 0x0100007f, 0, 0, 0, 128)
    write("pool", "reduce_last_hop",
          pool_rec(pool_dgram(REDUCE, length=64, dtype=2, flags=2, nhops=1, aux=1, hops=hop,
                              payload=floats)))
    write("pool", "unauthenticated", pool_rec(pool_dgram(READ, token=5, length=64), False))
    write("pool", "zero_record", pool_rec(pool_dgram(ADD, length=8192, dtype=1, flags=1)))
    # The optimizer: an update of 16 floats at 0 with m, v, g after them, repeated (applied once),
    # one whose m overlaps v, one past the region, and sums of squares.
    ADAMW, SUMSQ = 17, 18
    def adamw_args(m, v, g, step=1):
        return struct.pack("<6fqQQQ", 1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0, step, m, v, g)
    write("pool", "adamw_sumsq",
          pool_rec(pool_dgram(WRITE, length=64, payload=floats)) +
          pool_rec(pool_dgram(WRITE, seq=1, addr=192, length=64, payload=floats)) +
          pool_rec(pool_dgram(ADAMW, flow=2, length=64, dtype=1, payload=adamw_args(64, 128, 192))) +
          pool_rec(pool_dgram(ADAMW, flow=2, length=64, dtype=1, payload=adamw_args(64, 128, 192))) +
          pool_rec(pool_dgram(ADAMW, flow=3, length=64, dtype=1, payload=adamw_args(64, 96, 192))) +
          pool_rec(pool_dgram(ADAMW, flow=4, length=64, dtype=1,
                              payload=adamw_args(64, 128, (64 << 10) - 32))) +
          pool_rec(pool_dgram(SUMSQ, flow=5, length=64, dtype=1)) +
          pool_rec(pool_dgram(SUMSQ, flow=6, addr=(64 << 10) - 60, length=64, dtype=1)))


ckpt_seeds()
pool_seeds()
store_seeds()
store_client_seeds()
