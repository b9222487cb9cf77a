#!/bin/bash
# Mine each STORE with 15 option sets (exact, approximate and torch searches, every
# sampling, every false-negative mode, the outside search, easy negatives, three formats,
# JSON Lines on stdout) and write OUTDIR/SHA256SUMS of the tables and of the stats without
# their timings. Run it before and after a change and diff the two files: a refactor that
# changes nothing gives identical sums (issue 21's check).
#
#   PYTHONPATH=$PWD tests/benchmarks/mine_same_tables.sh /tmp/before STORE [STORE ...]
set -u
out=$1; shift
mkdir -p "$out"
PY=${PYTHON:-python}
sets=(
 "plain|--hard -k 5"
 "softmax|--hard -k 5 --sampling softmax --seed 3 --positive random"
 "random|--hard -k 4 --sampling random --range-min 2 --range-max 30 --absolute-margin 0.05"
 "fn|--hard --filter-false-negatives"
 "attract|--hard --filter-false-negatives --fn-mode attract --fn-rules label,near-duplicate,margin,community"
 "keep|--hard --filter-false-negatives --fn-mode keep --format n-tuple"
 "easy|--format labeled-pair -k 3"
 "easyfn|--filter-false-negatives --fn-mode keep -k 3"
 "ivf|--hard --index ivf --filter-false-negatives --fn-rules cluster"
 "hnsw|--hard --index hnsw --filter-false-negatives --fn-rules near-duplicate,cluster --fn-cluster-k 8"
 "torch|--hard --backend torch --filter-false-negatives"
 "label|--relation label --hard --min-score 0.1 --max-score 0.95 --relative-margin 0.1 --max-positives 8"
 "batch|--hard -k 6 --batch-size 700 --filter-false-negatives --fn-rules near-duplicate,margin"
 "votes|--hard --filter-false-negatives --fn-rules cluster --fn-cluster-votes 3"
 "f16|--hard --dtype float16 --index flat"
)
for store in "$@"; do
  tag=$(basename "$store")
  for s in "${sets[@]}"; do
    name=${s%%|*}; opts=${s#*|}
    # shellcheck disable=SC2086
    nice -n 10 "$PY" -m pairkit mine "$store" $opts -o "$out/$tag-$name.parquet" \
      --stats "$out/$tag-$name.json" --force -q 2>"$out/$tag-$name.err" || echo "FAIL $tag $name"
  done
  nice -n 10 "$PY" -m pairkit mine "$store" --hard --filter-false-negatives --fn-mode keep \
    -o - -q > "$out/$tag-jsonl.jsonl" 2>/dev/null || echo "FAIL $tag jsonl"
done
for f in "$out"/*.json; do
  "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('seconds',None); json.dump(d,open(sys.argv[1]+'.cmp','w'),indent=1,sort_keys=True)" "$f"
done
(cd "$out" && sha256sum ./*.parquet ./*.jsonl ./*.json.cmp > SHA256SUMS)
