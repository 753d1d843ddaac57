"""For test modules that need OpenRLHF's runtime (its agent executor and utils), not only its CLI."""

import importlib.util

import pytest


def require_openrlhf_runtime() -> None:
    """Skip the calling module where OpenRLHF is not installed, or is installed without its
    dependencies (an engine recipe with --no-deps, for argument parsing only: no deepspeed, and
    openrlhf.utils does not import there; every matrix cell now installs them). Where OpenRLHF is
    installed with its dependencies, an import error is a failure, not a skip."""
    pytest.importorskip("openrlhf")
    try:
        import openrlhf.utils.agent  # noqa: F401
    except ImportError as exc:
        if importlib.util.find_spec("deepspeed") is None:
            pytest.skip(
                f"OpenRLHF is installed without its dependencies here (an argument-parsing cell): {exc}",
                allow_module_level=True,
            )
        raise
