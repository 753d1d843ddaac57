"""The AReaL adapter's tests that need AReaL installed: the compat cells run them in its engine environment
(rlbridge.envs.compat); in rlbridge's own environment they skip (needs_areal)."""

import importlib.metadata

import pytest


def _areal() -> str | None:
    try:
        return importlib.metadata.version("areal")
    except importlib.metadata.PackageNotFoundError:
        return None


needs_areal = pytest.mark.skipif(_areal() != "1.0.4", reason="runs in the areal 1.0.4 engine environment")
"""A module's pytestmark: it runs where AReaL 1.0.4 is installed (its engine environment)."""
