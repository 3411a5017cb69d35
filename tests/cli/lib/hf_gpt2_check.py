"""Checks a directory written by `strata export --format hf` the way transformers would read it,
without transformers (Debian has no package for it): config.json as GPT2Config reads it,
model.safetensors as the safetensors library parses it (and transformers' "format": "pt" rule), the
parameter names and shapes against GPT2LMHeadModel's state_dict for that config, then HuggingFace
GPT-2's forward pass (modeling_gpt2.py: Conv1D y = x W + b, W [in, out]; q|k|v split of c_attn;
gelu_new; causal attention scaled by 1/sqrt(head dim); tied lm_head) reimplemented here from those
names alone, on the prompt's bytes, against the logits strata computed (`strata sample --logits`).

Usage: hf_gpt2_check.py HF_DIR PROMPT LOGITS_FILE. Exit 0 ok, 1 a difference (printed), 77 when
`import torch` fails (the reason printed): the check cannot run, which is not a pass."""
import json
import math
import struct
import sys

try:
    import torch
except ImportError as e:  # only this makes the check unrunnable
    print(f"SKIP: this python3 ({sys.executable}) cannot import torch ({e}); install python3-torch "
          f"to check the HuggingFace GPT-2 layout")
    sys.exit(77)


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def read_safetensors(path):
    """name -> float32 tensor, metadata; the rules the safetensors library enforces."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        fail(f"{path}: __metadata__ values must all be strings (safetensors)")
    data = blob[8 + n:]
    pos, out = 0, {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, end = e["data_offsets"]
        count = math.prod(e["shape"])
        if e["dtype"] != "F32" or b != pos or end - b != 4 * count:
            fail(f"{path}: tensor {name}: {e} does not tile the data section (at byte {pos})")
        out[name] = torch.frombuffer(bytearray(data[b:end]), dtype=torch.float32).reshape(e["shape"])
        pos = end
    if pos != len(data):
        fail(f"{path}: {len(data) - pos} data bytes belong to no tensor")
    return out, meta


def gpt2_state_dict_shapes(c):
    """GPT2LMHeadModel(GPT2Config(**c)).state_dict(): every parameter's name and shape (the
    attention mask buffers are not persistent in current transformers; lm_head is tied to wte)."""
    C, F, V = c["n_embd"], c.get("n_inner") or 4 * c["n_embd"], c["vocab_size"]
    s = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [c["n_positions"], C]}
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        s.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C],
                  p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                  p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                  p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                  p + "mlp.c_fc.weight": [C, F], p + "mlp.c_fc.bias": [F],
                  p + "mlp.c_proj.weight": [F, C], p + "mlp.c_proj.bias": [C]})
    s.update({"transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C], "lm_head.weight": [V, C]})
    return s


def gelu_new(x):  # transformers.activations.NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def hf_gpt2_logits(sd, c, ids):
    """GPT2LMHeadModel's forward (eval mode, no cache) on one sequence, in float64."""
    sd = {k: v.double() for k, v in sd.items()}
    C, NH, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
    hd, T = C // NH, len(ids)
    conv1d = lambda x, p: x @ sd[p + ".weight"] + sd[p + ".bias"]  # noqa: E731
    ln = lambda x, p: torch.nn.functional.layer_norm(  # noqa: E731
        x, (C,), sd[p + ".weight"], sd[p + ".bias"], eps)
    ids = torch.tensor(ids)
    h = sd["transformer.wte.weight"][ids] + sd["transformer.wpe.weight"][torch.arange(T)]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = conv1d(ln(h, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(T, NH, hd).transpose(0, 1) for t in (q, k, v))
        w = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        a = (w.softmax(dim=-1) @ v).transpose(0, 1).reshape(T, C)
        h = h + conv1d(a, p + "attn.c_proj")
        h = h + conv1d(gelu_new(conv1d(ln(h, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    head = sd.get("lm_head.weight", sd["transformer.wte.weight"])  # tied
    return ln(h, "transformer.ln_f") @ head.t()


def main():
    d, prompt, logits_path = sys.argv[1:4]
    c = json.load(open(f"{d}/config.json"))
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "activation_function": "gelu_new", "tie_word_embeddings": True}
    for k, v in want.items():
        if c.get(k) != v:
            fail(f"config.json: {k} is {c.get(k)!r}, expected {v!r}")
    sd, meta = read_safetensors(f"{d}/model.safetensors")
    if meta.get("format") != "pt":  # transformers refuses any other
        fail(f"model.safetensors: __metadata__ format is {meta.get('format')!r}, transformers wants 'pt'")
    expect = gpt2_state_dict_shapes(c)
    missing = sorted(set(expect) - set(sd) - {"lm_head.weight"})
    extra = sorted(set(sd) - set(expect))
    if missing or extra:
        fail(f"names: missing {missing[:5]}, unexpected {extra[:5]}")
    for k, t in sd.items():
        if list(t.shape) != expect[k]:
            fail(f"{k}: shape {list(t.shape)}, GPT-2 has {expect[k]}")
    print(f"names and shapes: the {len(sd)} tensors of GPT2LMHeadModel's state_dict "
          f"(lm_head tied), format pt")
    ids = list(prompt.encode())
    ours = hf_gpt2_logits(sd, c, ids)
    theirs = torch.tensor([[float(x) for x in line.split()] for line in open(logits_path)],
                          dtype=torch.float64)
    if theirs.shape != ours.shape:
        fail(f"strata's logits are {list(theirs.shape)}, GPT-2's {list(ours.shape)}")
    diff = ((ours - theirs).abs() / theirs.abs().clamp(min=1.0)).max().item()
    print(f"logits of {len(ids)} tokens x {c['vocab_size']}: max difference {diff:.2e} "
          f"(largest |logit| {theirs.abs().max().item():.2f})")
    if not diff <= 1e-4:
        fail("GPT-2's forward on the exported weights differs from strata's by more than 1e-4")


main()
