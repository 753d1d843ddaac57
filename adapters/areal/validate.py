"""AReaL's own config code on a plan: the GRPOConfig dataclasses (OmegaConf's structured merge and their
__post_init__ checks, what load_expr_config does) and the allocation parser of every engine's backend string."""

from __future__ import annotations

import copy
from typing import Any

from rlbridge.errors import RLBridgeError

PROMPT_TOKENS = 1024  # what a context sized at launch (AUTO) is validated with


def concrete(config: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    """The config with the launcher's AUTO context lengths as numbers."""
    from rlbridge_adapters.areal.backend import AUTO

    out = copy.deepcopy(config)
    for section, key in (("gconfig", "max_tokens"), ("vllm", "max_model_len"), ("sglang", "context_length")):
        if out.get(section, {}).get(key) == AUTO:
            out[section][key] = PROMPT_TOKENS + max_new_tokens
    return out


def validate_config(config: dict[str, Any]) -> Any:
    """The GRPOConfig AReaL would load from `config`; RLBridgeError naming the problem otherwise."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from areal.api.alloc_mode import ModelAllocation
    from areal.api.cli_args import GRPOConfig, to_structured_cfg

    config = concrete(config, int(config["gconfig"]["max_new_tokens"]))
    try:
        structured = OmegaConf.to_object(to_structured_cfg(OmegaConf.create(config), GRPOConfig))
    except (OmegaConfBaseException, ValueError, TypeError, AssertionError) as exc:
        raise RLBridgeError(f"AReaL's GRPOConfig refuses the plan: {exc}") from exc
    for role in ("actor", "rollout", "ref", "critic"):
        section = getattr(structured, role, None)
        if section is None:
            continue
        try:
            ModelAllocation.from_str(section.backend, name=role)
        except Exception as exc:  # AReaL's parser raises several kinds
            raise RLBridgeError(f"AReaL's allocation parser refuses {role}.backend={section.backend!r}: {exc}") from exc
    return structured
