"""User-facing errors: the CLI prints them in one line (exit code 2), without a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RLBridgeError(Exception):
    """A problem the user can fix; the message names the field and the fix."""


class ConfigError(RLBridgeError):
    """The config file or an override is invalid."""


class CapabilityError(RLBridgeError):
    """The chosen backend cannot honour a knob the config sets."""


class PluginNotFoundError(RLBridgeError):
    """A config names a plugin that is not registered."""


class EngineNotAvailableError(RLBridgeError):
    """The engine is not installed here, or its version is outside the adapter's supported range."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
