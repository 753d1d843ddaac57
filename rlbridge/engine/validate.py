"""`python -m rlbridge.engine.validate`, in an engine environment: `rlbridge plan --check` for an engine that is
not installed in the user's process (engine_env: auto). Reads the plan (Plan.to_dict) as JSON on stdin and runs
the backend's `validate` with the engine's own config code there; prints the engine and its version, or the
problem as one line on stderr with exit code 2."""

from __future__ import annotations

import json
import sys


def main() -> int:
    from rlbridge.contract.backend import Plan
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.errors import RLBridgeError

    plan = Plan.from_dict(json.load(sys.stdin))
    backend = get_plugin_manager().backend(plan.backend)
    try:
        version = backend.require_engine()
        backend.validate(plan)
    except RLBridgeError as exc:
        print(str(exc).replace("\n", " "), file=sys.stderr)
        return 2
    print(f"{plan.engine} {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
