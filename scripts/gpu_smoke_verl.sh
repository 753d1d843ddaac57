#!/usr/bin/env bash
# GPU smoke test of the verl adapter: 2 GRPO steps of the quickstart (a tiny random-weight model
# built locally) on verl 0.9.1 with vLLM rollout, then the canonical metrics.
#
# Usage (from the repository root, on a machine with an NVIDIA GPU):
#   scripts/gpu_smoke_verl.sh                 # installs from the package index
#   WHEELS=/path/to/wheels scripts/gpu_smoke_verl.sh   # no index: only pre-downloaded wheels
# Prepare the wheels on a machine with an index (same Python version and platform):
#   pip download -d wheels torch==2.11.0 'verl[verl-core]==0.9.1' vllm==0.24.0 -e .
#
# Every step says what it does; a step that cannot run says why, and the script stops there.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-runs/gpu-smoke-verl}
VENV=$WORK/venv
TORCH=${TORCH:-torch==2.11.0}          # the torch verl 0.9.1's [vllm] extra pins
VLLM=${VLLM:-vllm==0.24.0}
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
$PY -m pip install -q "${PIP_ARGS[@]}" "$TORCH" || fail "installing $TORCH failed (with WHEELS: is its wheel there?)"
$PY -m pip install -q "${PIP_ARGS[@]}" "verl[verl-core]==0.9.1" "$VLLM" "$TORCH" || fail "installing verl 0.9.1 and $VLLM failed"
$PY -m pip install -q "${PIP_ARGS[@]}" -e ".[plot]" "$TORCH" || fail "installing rlbridge failed"
$PY -c "import torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'; print('torch', torch.__version__, torch.cuda.get_device_name(0))" \
  || fail "torch cannot use the GPU (a CPU wheel, or a CUDA/driver mismatch)"

say "plan (validated by verl's own config code)"
export RLBRIDGE_CACHE_DIR=$WORK/cache HF_HUB_OFFLINE=1
ARGS=(--set backend=verl --set engine_env=current --set rollout.engine=vllm --set resources.gpus_per_node=1
      --set training.steps=2 --set output_dir=$WORK/run --set rollout.gpu_memory_utilization=0.3)
$VENV/bin/rlbridge plan configs/quickstart.yaml "${ARGS[@]}" --check > "$WORK/plan.txt" || fail "the plan did not validate (see above)"

say "2 GRPO steps on verl 0.9.1 + vLLM"
$VENV/bin/rlbridge train configs/quickstart.yaml "${ARGS[@]}" --no-progress 2>&1 | tee "$WORK/train.log" | tail -n 20
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "training failed: $WORK/train.log and $WORK/run/error.txt"

say "canonical metrics ($WORK/run/metrics.jsonl)"
cat "$WORK/run/metrics.jsonl"
echo

say "2 multi-turn GRPO steps: the digit_hint environment as a verl agent loop, its tool as a verl tool"
$VENV/bin/rlbridge train configs/multiturn.yaml "${ARGS[@]/$WORK\/run/$WORK/run-multiturn}" --set environment.name=digit_hint \
  --no-progress 2>&1 | tee "$WORK/train-multiturn.log" | tail -n 5
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "the multi-turn run failed: $WORK/train-multiturn.log and $WORK/run-multiturn/error.txt"
cat "$WORK/run-multiturn/metrics.jsonl"
echo

# The training layout (issue 42, docs/scale.md): the canonical knobs into verl's own keys, each plan validated by
# verl's config code (--check) before 2 steps run. MEGATRON=0 skips the Megatron run (it installs megatron-core).
layout() {  # layout NAME GPUS KNOB=VALUE...
  local name=$1 gpus=$2; shift 2
  local args=(--set backend=verl --set engine_env=current --set rollout.engine=vllm --set resources.gpus_per_node=$gpus
              --set training.steps=2 --set output_dir=$WORK/run-$name --set rollout.gpu_memory_utilization=0.3)
  for knob in "$@"; do args+=(--set "$knob"); done
  $VENV/bin/rlbridge plan configs/quickstart.yaml "${args[@]}" --check > "$WORK/plan-$name.txt" \
    || fail "the $name plan did not validate: $WORK/plan-$name.txt"
  $VENV/bin/rlbridge train configs/quickstart.yaml "${args[@]}" --no-progress 2>&1 | tee "$WORK/train-$name.log" | tail -n 3
  [ "${PIPESTATUS[0]}" -eq 0 ] || fail "the $name run failed: $WORK/train-$name.log and $WORK/run-$name/error.txt"
}
GPUS=$(nvidia-smi -L | wc -l)
say "layout: FSDP2 with parameters and optimizer offloaded to host memory (fsdp_config.param_offload / optimizer_offload)"
layout offload 1 training.offload.parameters=true training.offload.optimizer=true
if [ "$GPUS" -ge 2 ]; then
  say "layout: FSDP2 over $GPUS GPUs, gradients sharded (reshard_after_forward: false)"
  layout fsdp-gradients "$GPUS" training.strategy=fsdp training.sharding=gradients
fi
if [ "$GPUS" -ge 4 ] && [ "${MEGATRON:-1}" = 1 ]; then
  say "layout: Megatron, tensor 2 x pipeline 2 (model_engine=megatron; installs verl[mcore] and megatron-core)"
  $PY -m pip install -q "${PIP_ARGS[@]}" "verl[mcore]==0.9.1" megatron-core "$TORCH" || fail "installing megatron-core failed"
  layout megatron 4 training.strategy=megatron training.tensor_parallel_size=2 training.pipeline_parallel_size=2
else
  say "layout: Megatron skipped ($GPUS GPU(s); tensor 2 x pipeline 2 needs 4, MEGATRON=${MEGATRON:-1})"
fi
echo "OK: verl 0.9.1 ran 2 GRPO steps and 2 multi-turn steps, and the layouts above, on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
