"""rlbridge: one config, any RL post-training engine.

Importing rlbridge imports no torch, transformers or engine; adapters import their engine only
when they run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlbridge.contract.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]


def __getattr__(name: str) -> Any:
    # `from rlbridge import hookimpl` imports pluggy and the hook specifications only when a plugin
    # asks for it: `rlbridge --help` and `--version` need neither (start-up time, benchmarks/startup.py)
    if name == "hookimpl":
        from rlbridge.contract.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'rlbridge' has no attribute {name!r}")
