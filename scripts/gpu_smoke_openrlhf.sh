#!/usr/bin/env bash
# GPU smoke test of the OpenRLHF adapter: 2 GRPO (group_norm) steps of the quickstart (a tiny
# random-weight model built locally) on OpenRLHF 0.11.2 with vLLM rollout, then the canonical metrics.
#
# Usage (from the repository root, on a machine with at least one NVIDIA GPU):
#   scripts/gpu_smoke_openrlhf.sh                     # installs from the package index
#   WHEELS=/path/to/wheels scripts/gpu_smoke_openrlhf.sh   # no index: only pre-downloaded wheels
# Prepare the wheels on a machine with an index (same Python version and platform):
#   pip download -d wheels 'openrlhf[vllm]==0.11.2' flash-attn==2.8.3 -e .
# (flash-attn needs a CUDA toolchain to build, or a prebuilt wheel matching torch and CUDA.)
#
# Every step says what it does; a step that cannot run says why, and the script stops there.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-runs/gpu-smoke-openrlhf}
VENV=$WORK/venv
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
fail() { printf '\n!! %s\n' "$*"; exit 1; }

say "GPU"
command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this machine has no NVIDIA driver, nothing GPU-specific can run"
nvidia-smi -L || fail "nvidia-smi lists no GPU"

PIP_ARGS=()
if [ -n "${WHEELS:-}" ]; then
  [ -d "$WHEELS" ] || fail "WHEELS=$WHEELS is not a directory"
  PIP_ARGS=(--no-index --find-links "$WHEELS")
  say "installing only from $WHEELS (no package index)"
fi

say "environment $VENV"
python3 -m venv "$VENV" || fail "python3 -m venv failed"
PY=$VENV/bin/python
# vllm 0.29.0 (OpenRLHF's [vllm] extra) pins its CUDA torch: it is installed first, and everything after keeps it
$PY -m pip install -q "${PIP_ARGS[@]}" vllm==0.29.0 || fail "installing vllm 0.29.0 failed (with WHEELS: is its wheel there?)"
TORCH=$($PY -c "import torch; print('torch==' + torch.__version__.split('+')[0])")
$PY -m pip install -q "${PIP_ARGS[@]}" packaging psutil ninja "$TORCH" || fail "installing flash-attn's build tools failed"
$PY -m pip install -q "${PIP_ARGS[@]}" --no-build-isolation flash-attn==2.8.3 "$TORCH" \
  || fail "building flash-attn 2.8.3 failed (it needs nvcc matching torch's CUDA, or a prebuilt wheel in WHEELS)"
$PY -m pip install -q "${PIP_ARGS[@]}" openrlhf==0.11.2 "$TORCH" || fail "installing openrlhf 0.11.2 failed"
$PY -m pip install -q "${PIP_ARGS[@]}" -e ".[plot]" "$TORCH" || fail "installing rlbridge failed"
$PY -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print('torch', torch.__version__, torch.cuda.get_device_name(0))" \
  || fail "torch cannot use the GPU (a CPU wheel, or a CUDA/driver mismatch)"

say "plan (validated by OpenRLHF's own parser)"
export RLBRIDGE_CACHE_DIR=$WORK/cache HF_HUB_OFFLINE=1
ARGS=(--set backend=openrlhf --set engine_env=current --set resources.gpus_per_node=1
      --set training.steps=2 --set output_dir=$WORK/run --set rollout.gpu_memory_utilization=0.3)
$VENV/bin/rlbridge plan configs/quickstart.yaml "${ARGS[@]}" --check > "$WORK/plan.txt" || fail "the plan did not validate (see above)"

say "2 GRPO steps on OpenRLHF 0.11.2 + vLLM"
$VENV/bin/rlbridge train configs/quickstart.yaml "${ARGS[@]}" --no-progress 2>&1 | tee "$WORK/train.log" | tail -n 20
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "training failed: $WORK/train.log and $WORK/run/error.txt"

say "canonical metrics ($WORK/run/metrics.jsonl)"
cat "$WORK/run/metrics.jsonl"
echo

# The training layout (issue 42, docs/scale.md): ZeRO-3 with Adam offloaded, which OpenRLHF's own large-model
# recipes ask for; the plan validated by OpenRLHF's parser (--check), then 2 steps.
say "layout: ZeRO-3 (training.sharding: parameters) with the optimizer offloaded (--ds.zero_stage 3 --ds.adam_offload)"
LAYOUT=(--set backend=openrlhf --set engine_env=current --set resources.gpus_per_node=1 --set training.steps=2
        --set output_dir=$WORK/run-zero3 --set rollout.gpu_memory_utilization=0.3
        --set training.sharding=parameters --set training.offload.optimizer=true)
$VENV/bin/rlbridge plan configs/quickstart.yaml "${LAYOUT[@]}" --check > "$WORK/plan-zero3.txt" \
  || fail "the ZeRO-3 plan did not validate: $WORK/plan-zero3.txt"
grep -q -- "--ds.zero_stage 3" "$WORK/plan-zero3.txt" || fail "the plan does not say --ds.zero_stage 3: $WORK/plan-zero3.txt"
$VENV/bin/rlbridge train configs/quickstart.yaml "${LAYOUT[@]}" --no-progress 2>&1 | tee "$WORK/train-zero3.log" | tail -n 3
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "the ZeRO-3 run failed: $WORK/train-zero3.log and $WORK/run-zero3/error.txt"
echo "OK: OpenRLHF 0.11.2 ran 2 GRPO steps, and 2 under ZeRO-3 with Adam offload, on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
