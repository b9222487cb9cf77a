#!/usr/bin/env bash
# The GPU suite of issues 11 and 24: every GPU figure and the whole test suite with the GPU
# visible in one go (under 8 minutes on one H200), nothing downloaded, one JSON. From the
# repository root:
#
#   bash tests/benchmarks/gpu_wheels.sh                 # once, HERE (where pip works): .whl/
#   bash tests/benchmarks/gpu_suite.sh                  # there: $OUT/gpu_suite.json + .log
#   bash tests/benchmarks/gpu_suite.sh --parts tests,startup   # some parts
#   bash tests/benchmarks/gpu_suite.sh --smoke          # tiny sizes on the CPU
#   bash tests/benchmarks/gpu_suite.sh --dry-run        # the plan only
#
# The host needs python3 with torch (CUDA), torchvision, numpy, pandas, pyarrow, typer, rich,
# scikit-learn, scipy, timm, huggingface_hub, safetensors, regex, pillow, pytest-xdist (the
# nvidia-h200 image has them). What it lacks travels as wheels in .whl/ (faiss-cpu,
# open_clip_torch, ftfy, wcwidth, pytorch-metric-learning: gpu_wheels.sh, docs/gpu.md) and
# is installed into /tmp/pairkit-site with --no-deps. pairkit runs from this checkout
# (PYTHONPATH); a `pairkit` shim on PATH serves the examples' tests.
#
# Environment: OUT (output folder, default ./gpu-suite-out), PYTHON (default python3),
# GPU_SUITE_BUDGET (seconds for the parts, default 430). The parts, their time guards and
# what each measures: tests/benchmarks/gpu_suite.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-suite-out}
py=${PYTHON:-python3}
mkdir -p "$out"
smoke=0
for a in "$@"; do case "$a" in --smoke|--dry-run) smoke=1 ;; esac; done

if [ "$smoke" = 0 ] && ! ls .whl/*.whl >/dev/null 2>&1 \
    && ! "$py" -c "import faiss, open_clip" 2>/dev/null; then
  echo "no .whl/ wheels and no faiss/open_clip here: run tests/benchmarks/gpu_wheels.sh first" \
    "where pip works, and carry .whl (docs/gpu.md)" >&2
fi
if [ "$smoke" = 0 ] && ls .whl/*.whl >/dev/null 2>&1; then
  t0=$SECONDS
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/pairkit-site .whl/*.whl 2>&1 | tail -3
  export PYTHONPATH=/tmp/pairkit-site${PYTHONPATH:+:$PYTHONPATH}
  echo "wheels installed in $((SECONDS - t0)) s: $(ls .whl | tr '\n' ' ')"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p /tmp/pairkit-bin
printf '#!/bin/sh\nexec %s -m pairkit "$@"\n' "$(command -v "$py")" > /tmp/pairkit-bin/pairkit
chmod +x /tmp/pairkit-bin/pairkit
export PATH=/tmp/pairkit-bin:$PATH

exec "$py" tests/benchmarks/gpu_suite.py --out "$out/gpu_suite.json" --log "$out/gpu_suite.log" \
  --budget "${GPU_SUITE_BUDGET:-430}" "$@"
