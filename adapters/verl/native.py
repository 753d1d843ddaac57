"""A bench arm of kind `native` on verl: the plan's main_ppo overrides run by verl's own entry point
(`python -m verl.trainer.main_ppo ...`), with no rlbridge process around it. It measures rlbridge's
overhead on verl.

Two sub-commands, both run by `rlbridge bench` with the engine environment's Python, outside the
timed command:

- `prepare JOB.json RUN_DIR` writes what a verl user prepares before launching: the parquet data, the
  model directory with the run's chat template, a verl reward function file (`compute_score`, called
  by verl's own `naive` reward manager), and RUN_DIR/native_cmd.json: the command, its environment and
  the JSONL file verl's own `file` logger writes one line per step to.
- `canonical RAW.jsonl OUT.jsonl` maps that file to canonical metric names (as a run's metrics.jsonl).

What is not verl's own: rlbridge's CPU patches, and only them (verl does not run on CPU without them).
They are installed in every process of the run (driver, Ray workers, vLLM) by the Ray engines'
sitecustomize calling install_patches_only: no reward manager, metric copy, seeding or weight-sync hook.
The private Ray cluster (logical GPUs for verl's resource pools on CPU, a private temp dir, never
attaching to another job's cluster) is asked of verl's own `ray_kwargs.ray_init`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from rlbridge.engine.kit import (
    native_arm_main,
    install_native_arm_patches,
    native_arm_env,
    start_native_arm,
    write_native_cmd,
)


# The quickstart's digit_match reward (plugins/rewards.py) as a verl user writes it. verl's reward
# manager hands compute_score the response decoded without special tokens and no token ids; with the
# byte-level tiny-digits tokenizer the response's tokens are its characters, plus the end-of-sequence
# token that ended it when it is shorter than the response cap (the only way generation stops early),
# which digit_match counts too. {max_new_tokens} is filled in by prepare().
REWARD_FILES = {
    "digit_match": '''\
MAX_NEW_TOKENS = {max_new_tokens}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of the response's tokens equal to the answer digit."""
    n = len(solution_str) + (1 if len(solution_str) < MAX_NEW_TOKENS else 0)
    return min(solution_str.count(str(ground_truth)), max(n, 1)) / max(n, 1)
''',
}


def install_patches_only() -> None:
    """The boot (rlbridge.engine.ray_engine.boot_env) of a native arm's processes: the CPU-enablement
    patches (and those marked in_native_arms), nothing else."""
    from rlbridge_adapters.verl.boot import NATIVE_ENV
    from rlbridge_adapters.verl.patches import PATCHES

    install_native_arm_patches(PATCHES, NATIVE_ENV, "RLBRIDGE_VERL_PATCH_REPORT_UNUSED")


def prepare(job_path: Path, run_dir: Path) -> dict:
    from rlbridge.engine.model_dir import model_dir_with_template
    from rlbridge_adapters.verl.boot import NATIVE_ENV
    from rlbridge_adapters.verl.train import longest_prompt, to_verl_rows, write_parquet
    from rlbridge_adapters.verl.validate import overrides_for

    job, native, run_dir = start_native_arm(job_path, run_dir, REWARD_FILES, "native verl arm", "a verl reward file")
    rewards = native["rewards"]
    if native.get("environment") or native.get("tools"):
        raise SystemExit(
            "native verl arm: environments and tools need rlbridge's agent loop; bench them with kind rlbridge"
        )
    model_dir = model_dir_with_template(job["model_dir"], native["model"]["chat_template"], run_dir)
    data = native["data"]
    rows = to_verl_rows(job["rows"], data["prompt_key"], data["answer_key"], "train")
    write_parquet(rows, run_dir / "data" / "train.parquet")
    write_parquet(rows[: max(1, min(len(rows), job["batch_size"]))], run_dir / "data" / "val.parquet")
    reward_file = run_dir / "reward_fn.py"
    reward_file.write_text(REWARD_FILES[rewards[0]["name"]].replace("{max_new_tokens}", str(job["max_new_tokens"])))

    overrides = overrides_for(native, str(run_dir), model_dir, max_prompt_length=longest_prompt(rows, model_dir))
    swap = {
        "reward.reward_manager.name": "reward.reward_manager.name=naive",
        "trainer.logger": "trainer.logger=[console,file]",
    }
    swap["trainer.default_local_dir"] = f"trainer.default_local_dir={run_dir / 'checkpoints'}"
    overrides = [swap.get(o.split("=", 1)[0], o) for o in overrides]
    overrides += [
        f"reward.custom_reward_function.path={reward_file}",
        "reward.custom_reward_function.name=compute_score",
    ]
    ray = native["ray"]
    tmp = tempfile.mkdtemp(prefix="rlb-ray-")  # short: Ray's socket paths have a length limit
    overrides += [
        f"ray_kwargs.ray_init.num_cpus={ray['num_cpus']}",
        "+ray_kwargs.ray_init.address=local",  # a private cluster, never another job's
        f"+ray_kwargs.ray_init._temp_dir={tmp}",
        "+ray_kwargs.ray_init.include_dashboard=false",
    ]
    if ray.get("logical_gpus"):
        overrides.append(f"+ray_kwargs.ray_init.num_gpus={ray['logical_gpus']}")
    if ray.get("cpu_resource"):
        overrides.append(f"+ray_kwargs.ray_init.resources={{cpu:{ray['num_cpus']}}}")
    raw = run_dir / "verl_metrics.jsonl"
    env = native_arm_env(
        native,
        run_dir,
        "rlbridge_adapters.verl.native:install_patches_only",
        NATIVE_ENV,
        "verl_native_plan.json",
        VERL_FILE_LOGGER_PATH=str(raw),
    )
    env.pop("RLBRIDGE_SEED", None)  # read only by rlbridge's full bootstrap
    cmd = {
        "argv": [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
        "env": env,
        "metrics": str(raw),
        "cwd": str(run_dir),
        "ray_temp_dir": tmp,
    }
    return write_native_cmd(run_dir, cmd)


def canonical(raw: Path, out: Path) -> None:
    from rlbridge_adapters.verl.metrics import to_canonical

    with open(out, "w") as fh:
        for line in raw.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            data = {k: v for k, v in row["data"].items() if isinstance(v, (int, float))}
            if not any(k.startswith(("actor/", "timing_s/")) for k in data):
                continue  # a validation-only line
            fh.write(json.dumps({"step": int(row["step"]), **to_canonical(data)}) + "\n")


def main(argv: list[str]) -> None:
    usage = "usage: python -m rlbridge_adapters.verl.native prepare JOB.json RUN_DIR | canonical RAW.jsonl OUT.jsonl"
    native_arm_main(argv, prepare, canonical, usage)


if __name__ == "__main__":
    main(sys.argv[1:])
