#!/usr/bin/env bash
# `strata export --format hf` (issue 17): a 2-rank ZeRO-2 run's sharded checkpoint (an MLP width
# other than 4 x dim, so n_inner counts) exported as a HuggingFace GPT-2 directory, then checked by
# tests/cli/lib/hf_gpt2_check.py with /usr/bin/python3 and torch: config.json and model.safetensors
# as transformers reads them, the names and shapes of GPT2LMHeadModel's state_dict, and HF GPT-2's
# forward reimplemented from those names alone giving strata's logits (`strata sample --logits`)
# within 1e-4. Also: the default format still writes strata's names, and a bad --format or an
# unwritable directory is refused by name. Skipped (77, reason printed) only when torch cannot be
# imported, after the other checks passed.
# Usage: export_hf.sh path/to/strata
set -euo pipefail
S=$(realpath "$1")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
. tests/cli/lib/train.sh
A=(--data data/corpus/strata_tales.txt --layers 2 --heads 2 --dim 32 --ff 96 --seq 32 --batch 8
   --warmup 5 --lr 3e-3 --threads 1 --quiet)

"$S" launch -n 2 --no-prefix -- "$S" train "${A[@]}" --zero 2 --steps 30 --ckpt-dir "$W/ck" \
    --ckpt-every 30 2>"$W/train.log" || { cat "$W/train.log"; exit 1; }
"$S" export --ckpt "$W/ck" --format hf --out "$W/hf" 2>"$W/export.log" || { cat "$W/export.log"; exit 1; }
grep -q "written to $W/hf/model.safetensors and $W/hf/config.json" "$W/export.log" &&
    echo "export --format hf: ok" || { cat "$W/export.log"; echo "export --format hf: FAIL"; fail=1; }
prompt="Tale 7. The fox"
"$S" sample --ckpt "$W/ck" --prompt "$prompt" --tokens 0 --logits "$W/logits.txt" >/dev/null
[ "$(wc -l <"$W/logits.txt")" = ${#prompt} ] && echo "sample --logits: ok" ||
    { echo "sample --logits: FAIL ($(wc -l <"$W/logits.txt") lines for ${#prompt} tokens)"; fail=1; }

# The default format: strata's names, which strata sample reads back to the same logits.
"$S" export --ckpt "$W/ck" --out "$W/m.safetensors" 2>/dev/null
"$S" sample --ckpt "$W/m.safetensors" --prompt "$prompt" --tokens 0 --logits "$W/logits2.txt" >/dev/null
cmp -s "$W/logits.txt" "$W/logits2.txt" && echo "export (strata names): ok" ||
    { echo "export (strata names): FAIL (other logits)"; fail=1; }

expect_error "--format onnx refused" "--format is strata or hf, not 'onnx'" \
    "$S" export --ckpt "$W/ck" --format onnx --out "$W/x"
expect_error "unwritable --out named" "cannot create $W/logits.txt/hf" \
    "$S" export --ckpt "$W/ck" --format hf --out "$W/logits.txt/hf"

PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
if [ -z "$PY" ]; then
    echo "SKIP: no python3 to check the HuggingFace GPT-2 layout with"
    [ $fail = 0 ] && exit 77 || exit 1
fi
rc=0
"$PY" tests/cli/lib/hf_gpt2_check.py "$W/hf" "$prompt" "$W/logits.txt" || rc=$?
if [ $rc = 77 ]; then [ $fail = 0 ] && exit 77 || exit 1; fi
[ $rc = 0 ] && echo "HF GPT-2 layout and forward: ok" || { echo "HF GPT-2 layout and forward: FAIL"; fail=1; }
exit $fail
