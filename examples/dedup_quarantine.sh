#!/usr/bin/env bash
# Find near-duplicates and move every copy but one into a quarantine folder.
set -euo pipefail
work=${1:?usage: $0 NEW_WORK_DIR}

pairkit demo "$work" --images-only --limit 300
pairkit embed "$work/images" -o "$work/store" --model pixels --quiet

mkdir -p "$work/quarantine"
moved=0
# --paths-only --drop -0: NUL-separated paths relative to the image folder (safe for any
# file name), the kept copy of each group (--keep best: the best original) left out
while IFS= read -r -d '' path; do
  mkdir -p "$work/quarantine/$(dirname "$path")"
  mv -- "$work/images/$path" "$work/quarantine/$path"
  moved=$((moved + 1))
done < <(pairkit dedup "$work/store" --method threshold --paths-only --drop -0 --quiet)

echo "moved $moved near-duplicates to $work/quarantine"
