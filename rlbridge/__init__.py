"""rlbridge: one config, any RL post-training engine.

Importing rlbridge imports no torch, transformers or engine; adapters import their engine only
when they run.
"""

from rlbridge.contract.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
