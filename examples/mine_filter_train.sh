#!/usr/bin/env bash
# Mine to stdout, keep only negatives that are not too close to their anchor, train on stdin.
set -euo pipefail
work=${1:?usage: $0 NEW_WORK_DIR}

pairkit demo "$work" --images-only --limit 400
pairkit embed "$work/images" -o "$work/store" --model pixels --views 2 --labels folder --quiet

# 1. mine hard negatives (false negatives filtered) as JSON Lines on stdout
# 2. drop rows whose negative scores above 0.9 (any per-row rule works here); rows of
#    mined positives (positive_kind "mined") have no negative and stay
# 3. train a head from stdin
pairkit mine "$work/store" --hard --filter-false-negatives -o - --quiet \
  | python3 -c '
import json, sys
for line in sys.stdin:
    row = json.loads(line)
    if row["neg_score"] is None or row["neg_score"] < 0.9:
        sys.stdout.write(line)
' \
  | pairkit train "$work/store" --pairs - -o "$work/head" --epochs 3 --quiet

ls "$work/head"
