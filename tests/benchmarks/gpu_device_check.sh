#!/usr/bin/env bash
# GPU check of the --device vocabulary (issue 13), on a machine with a CUDA GPU:
#
#   bash tests/benchmarks/gpu_device_check.sh            # from the repository root
#
# Needs a Python with pairkit's dependencies as $PYTHON (default python3); with faiss-cpu
# (the default) --backend auto searches with the exact torch search on the GPU, with
# faiss-gpu (docs/gpu.md) on FAISS GPU indices. About 1-2 minutes. Checks that mine, dedup
# and eval search on the GPU for --device cuda and cuda:0, give the CPU's results (exact
# search), and that --device cuda:99 fails in one line (exit 1).
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
work=$(mktemp -d)
fail=0
check() { if "$@"; then echo "ok: $*"; else echo "FAILED: $*"; fail=1; fi; }

$py -c "import faiss, torch; print('faiss GPUs:', faiss.get_num_gpus(), '| torch:', torch.cuda.get_device_name(0))" || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
$py - "$work" <<'PY'
import sys
import numpy as np, pandas as pd
from pairkit.core.store_writer import write_store
rng = np.random.default_rng(0)
c = rng.normal(size=(50, 64))
x = np.concatenate([c[i % 50] + 0.3 * rng.normal(size=(2, 64)) for i in range(20000)])
items = pd.DataFrame({"path": [f"s{i // 2}.jpg" for i in range(len(x))], "view": np.arange(len(x)) % 2,
                      "label": [f"c{(i // 2) % 50}" for i in range(len(x))]})
write_store(f"{sys.argv[1]}/store", x.astype(np.float32), items, encoder={"name": "random"})
PY
for dev in cpu cuda cuda:0 auto; do
  check $py -m pairkit mine "$work/store" --hard --index flat --device "$dev" -q -o "$work/m-$dev.parquet"
  check $py -m pairkit dedup "$work/store" -t 0.99 --device "$dev" -q -o "$work/d-$dev.csv"
  check $py -m pairkit eval "$work/store" --device "$dev" --metrics knn,retrieval --json -q > "$work/e-$dev.json"
done
$py -m pairkit mine "$work/store" --hard --index flat --device cuda -o "$work/x.parquet" 2>&1 \
  | grep -E -q "on GPU|on cuda" && echo "ok: mine searched on the GPU" \
  || { echo "FAILED: mine did not search on the GPU"; fail=1; }
$py - "$work" <<'PY' || fail=1
import json, sys
import pandas as pd
w = sys.argv[1]
cpu = pd.read_parquet(f"{w}/m-cpu.parquet")
for dev in ("cuda", "cuda:0", "auto"):
    gpu = pd.read_parquet(f"{w}/m-{dev}.parquet")
    same = (gpu["negative_id"].to_numpy() == cpu["negative_id"].to_numpy()).mean()
    print(f"mine --device {dev}: {same:.4f} of negatives equal the CPU's")
    assert same > 0.99, dev
    d = pd.read_csv(f"{w}/d-{dev}.csv"); dc = pd.read_csv(f"{w}/d-cpu.csv")
    assert d["path"].tolist() == dc["path"].tolist(), f"dedup {dev}"
    e, ec = json.load(open(f"{w}/e-{dev}.json")), json.load(open(f"{w}/e-cpu.json"))
    assert abs(e["knn_top1"] - ec["knn_top1"]) < 1e-3, f"eval {dev}"
print("results on GPU equal the CPU's")
PY
$py -m pairkit mine "$work/store" --hard --device cuda:99 -o "$work/y.parquet" 2>"$work/err"; rc=$?
[ "$rc" = 1 ] && [ "$(wc -l < "$work/err")" = 1 ] && echo "ok: --device cuda:99 -> exit 1, one line" \
  || { echo "FAILED: --device cuda:99 gave exit $rc: $(cat "$work/err")"; fail=1; }
rm -rf "$work"
exit $fail
