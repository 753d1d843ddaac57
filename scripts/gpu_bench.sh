#!/usr/bin/env bash
# GPU bench: `rlbridge bench configs/bench-gpu.yaml` on one NVIDIA GPU with torch and transformers
# but no vLLM, no Ray and no model hub. The model (Qwen2.5-0.5B's shape, random weights) is built
# on the machine; TRL with HF generate is the engine such a machine can run (verl needs Ray;
# OpenRLHF needs Ray and vLLM). Arms: rlbridge on TRL, TRL's own trainer (overhead), bf16 vs fp32.
#
# Usage (from the repository root):
#   scripts/gpu_bench.sh                       # missing packages from the package index
#   WHEELS=/path/to/wheels scripts/gpu_bench.sh   # no index: only pre-downloaded wheels
# Prepare the wheels on a machine with an index, for the GPU machine's Python version:
#   pip download -d wheels --python-version 3.X --only-binary=:all: --no-deps \
#       trl==1.16.0 accelerate datasets pyarrow ... (what step "packages" reports missing)
# Writes runs/gpu-bench/bench/{report.md,results.json,*.png} (BENCH_DIR= elsewhere). Every step says what it does; a
# step that cannot run says why, and the script stops there.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-runs/gpu-bench}
SPEC=${SPEC:-configs/bench-gpu.yaml}
BENCH_DIR=${BENCH_DIR:-$WORK/bench}
PY=${PYTHON:-python3}
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
fail() { printf '\n!! %s\n' "$*"; exit 1; }

say "GPU and Python"
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "(no nvidia-smi; torch decides below)"
$PY -c "import sys, torch, transformers; assert torch.cuda.is_available(), 'torch sees no CUDA device';
print('python', sys.version.split()[0], '| torch', torch.__version__, '| transformers', transformers.__version__, '|', torch.cuda.get_device_name(0))" \
  || fail "$PY needs torch with CUDA and transformers"
TORCH_VERSION=$($PY -c 'import torch; print(torch.__version__)')
TORCH_PIN="torch==$TORCH_VERSION"

say "environment $WORK/venv (sees this Python's packages, torch and transformers included)"
if [ ! -x "$WORK/venv/bin/python" ]; then
  $PY -m venv "$WORK/venv" || fail "python -m venv failed"
  # a .pth with this Python's site-packages (works when $PY is itself a venv, where
  # --system-site-packages would reach the base interpreter instead)
  $PY -c "import site; print('\n'.join(site.getsitepackages()))" > "$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_parent_site.pth"
fi
VPY=$WORK/venv/bin/python
PIP_ARGS=(--disable-pip-version-check -q)
if [ -n "${WHEELS:-}" ]; then
  [ -d "$WHEELS" ] || fail "WHEELS=$WHEELS is not a directory"
  PIP_ARGS+=(--no-index --find-links "$WHEELS")
  TORCH_PIN=packaging  # no index: nothing can replace torch (checked below); a local-version pin would not resolve
fi

say "packages"
missing=()
for mod in trl accelerate datasets scipy psutil matplotlib pydantic pluggy yaml typer rich packaging; do
  $VPY -c "import $mod" 2>/dev/null || missing+=("$mod")
done
echo "missing here: ${missing[*]:-none}"
# the installed torch is pinned in every pip call, so nothing can replace it
$VPY -c "import setuptools" 2>/dev/null || $VPY -m pip install "${PIP_ARGS[@]}" setuptools wheel 2>&1 | tail -3
$VPY -m pip install "${PIP_ARGS[@]}" "trl==1.16.0" "$TORCH_PIN" 2>&1 | tail -3
$VPY -c "import trl" || fail "trl 1.16.0 could not be installed (offline? give WHEELS=)"
$VPY -m pip install "${PIP_ARGS[@]}" --no-build-isolation -e ".[bench]" "$TORCH_PIN" 2>&1 | tail -3
$VPY -c "import rlbridge, scipy, psutil" || fail "rlbridge[bench] could not be installed (offline? give WHEELS=)"
$VPY -c "import torch; assert torch.__version__ == '$TORCH_VERSION', 'torch was replaced'" || fail "torch was replaced"

say "plan (nothing runs)"
export HF_HUB_OFFLINE=1
$WORK/venv/bin/rlbridge bench "$SPEC" -o "$BENCH_DIR" --dry-run || fail "the bench spec does not plan here"

say "bench: every arm x seed is one fresh process, one at a time"
$WORK/venv/bin/rlbridge bench "$SPEC" -o "$BENCH_DIR" --no-progress
rc=$?
[ -f "$BENCH_DIR/report.md" ] && cat "$BENCH_DIR/report.md"
exit $rc
