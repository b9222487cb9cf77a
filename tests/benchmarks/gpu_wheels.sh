#!/usr/bin/env bash
# The wheels gpu_suite.sh installs on the nvidia-h200 device host (python3.12, torch 2.11
# CUDA 13, nothing reachable from there), fetched here where pip reaches PyPI. From the
# repository root:
#
#   bash tests/benchmarks/gpu_wheels.sh        # -> .whl/ (about 21 MB), git-ignored
#
# Only what that host lacks (its image has torch, torchvision, numpy, pandas, pyarrow,
# typer, rich, pillow, safetensors, scipy, scikit-learn, matplotlib, timm, huggingface_hub,
# regex, tqdm, pytest, pytest-xdist): FAISS (CPU build; faiss-gpu wheels need the CUDA 12
# runtime) and open_clip with the two pure-Python packages it needs that are missing there,
# and pytorch-metric-learning (the test suite checks losses against it). One version of
# each, --no-deps: a second version of a package stops the whole install there.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
mkdir -p .whl
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl \
  faiss-cpu==1.15.1 open_clip_torch==3.3.0 ftfy==6.3.1 wcwidth==0.9.4 \
  pytorch-metric-learning==2.9.0
ls -l .whl
du -sh .whl
