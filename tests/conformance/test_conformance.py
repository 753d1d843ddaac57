"""rlbridge's own backends run the shipped conformance suite (`rlbridge.testing.suite`), exactly as a
third-party backend package does: import the suite into a test module. The `backend` fixture of the
suite parametrises over every registered backend whose engine is installed here."""

from rlbridge.testing.suite import *  # noqa: F401,F403
from rlbridge.testing.effects import *  # noqa: F401,F403,E402  (the knob effect test: every knob x every backend, plan-only)
