#!/usr/bin/env bash
# One GPU suite: every GPU figure of pairkit in one go, nothing downloaded.
#
#   bash tests/benchmarks/gpu_suite.sh [OUT.json]        # from the repository root
#
# Needs: a Python with pairkit's dependencies (torch with CUDA, faiss-gpu, open_clip)
# importable as $PYTHON (default python3) and one H100/H200-class GPU. Budget: under
# 8 minutes in all; each part has its own time limit so one slow part can't eat the rest.
# Random-weight models, generated JPEGs and generated vectors only.
#
# Parts:
#   embed  ViT-B-32 fp16, batch 256, 3,000 generated JPEGs: pairkit embed images/s, the
#          encoder alone on tensors, and decode+resize alone (tests/benchmarks/embed_throughput.py)
#   mine   N = 1,000,000 x 512, --num-negatives 5, exact GPU search (mine_speed.py)
#   train  pairs/s, fp16, batch 4096, 512 -> 128 MLP (train_throughput.py)
#   eval   kNN + retrieval, 100,000 queries x 1,000,000 references (eval_speed.py)
# Then merges the parts' JSON into OUT.json (default gpu_suite.json) with the device name.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-gpu_suite.json}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
export PYTHONUNBUFFERED=1

$py -c "import torch, faiss; assert torch.cuda.is_available(), 'no CUDA GPU visible'; \
print('GPU:', torch.cuda.get_device_name(0), '| faiss GPUs:', faiss.get_num_gpus())" || exit 1

run_part() {  # name, seconds, command...
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s)"
  local t0=$SECONDS
  timeout "$limit" "$@"
  local rc=$?
  echo "{\"part\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}" > "$tmp/$name.status.json"
}

run_part embed 150 $py tests/benchmarks/embed_throughput.py --device cuda \
  --model openclip/ViT-B-32 --batch-size 256 --n 3000 --workers default --out "$tmp/embed.json"
run_part mine 120 $py tests/benchmarks/mine_speed.py --n-exact 1000000 --parts exact \
  --out "$tmp/mine.json"
run_part train 60 $py tests/benchmarks/train_throughput.py --out "$tmp/train.json"
run_part eval 120 $py tests/benchmarks/eval_speed.py --pml-mem-gb 16 --timeout 100 \
  --out "$tmp/eval.json"

$py - "$tmp" "$out" <<'PY'
import datetime, json, pathlib, sys
import torch
tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
result = {"date": datetime.date.today().isoformat(),
          "device": torch.cuda.get_device_name(0), "parts": {}}
for name in ("embed", "mine", "train", "eval"):
    part = json.loads((tmp / f"{name}.status.json").read_text())
    data = tmp / f"{name}.json"
    part["result"] = json.loads(data.read_text()) if data.exists() else None
    result["parts"][name] = part
out.write_text(json.dumps(result, indent=2))
print(f"wrote {out}")
PY
