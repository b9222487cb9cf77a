#!/usr/bin/env bash
# The loop: embed -> mine -> train -> project -> mine again -> eval (raw vs projected).
set -euo pipefail
work=${1:?usage: $0 NEW_WORK_DIR}

pairkit demo "$work" --images-only --limit 500
pairkit embed "$work/images" -o "$work/store" --model pixels --views 2 --labels folder --quiet
pairkit mine "$work/store" --hard --filter-false-negatives -o "$work/pairs.parquet" --quiet
pairkit train "$work/store" --pairs "$work/pairs.parquet" -o "$work/head" --epochs 5 --quiet
pairkit project "$work/store" --head "$work/head" -o "$work/projected" --quiet
# mine again in the head's space: the next round of hard negatives
pairkit mine "$work/projected" --hard --filter-false-negatives -o "$work/pairs-2.parquet" --quiet
# the metrics printed below: the kNN classifier and retrieval (the linear probe and the
# geometry, eval's other metrics, are left out: add them to --metrics to see them too)
pairkit eval "$work/store" --test-fraction 0.3 --metrics knn,retrieval --json > "$work/eval-raw.json"
pairkit eval "$work/projected" --test-fraction 0.3 --metrics knn,retrieval --json > "$work/eval-projected.json"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
raw = json.load(open(f"{work}/eval-raw.json"))
projected = json.load(open(f"{work}/eval-projected.json"))
for key in ("knn_top1", "precision_at_1", "map_at_r"):
    print(f"{key}: raw {raw[key]:.3f} -> projected {projected[key]:.3f}")
PY
