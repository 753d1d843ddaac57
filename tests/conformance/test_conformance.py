"""rlbridge's own backends run the shipped conformance suite (`rlbridge.testing.suite`, the knob effect
test included), exactly as a third-party backend package does: import the suite into a test module.
The `backend` fixture of the suite parametrises over every registered backend (found through the
`rlbridge` entry points) whose engine is installed here, and over every one for the plan-only tests."""

from rlbridge.testing.suite import *  # noqa: F401,F403
