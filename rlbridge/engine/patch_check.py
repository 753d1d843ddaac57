"""`python -m rlbridge.engine.patch_check [BACKEND...]`, run by `rlbridge patches check` inside each
engine environment: for every patch of the backends installed here, whether its range covers the
installed version, whether its targets' source still has the fingerprint it was written against, and,
where the patch carries a `check`, whether the failure it fixes still happens on the unpatched path
(this process applies no patch: the adapters' bootstraps only act in a run's processes). Prints JSON.
"""

from __future__ import annotations

import json
import sys
import traceback


def check(backends: list[str] | None = None) -> list[dict]:
    from rlbridge.contract.registry import get_plugin_manager
    from rlbridge.engine.patch_report import drift
    from rlbridge.engine.patches import installed_version

    pm = get_plugin_manager()
    out = []
    for name, reg in sorted(pm.items["backend"].items()):
        cls = reg.item
        if (backends and name not in backends) or cls.installed_version() is None:
            continue
        for patch in cls().patches():
            version = installed_version(patch.engine)
            entry = {
                "backend": name,
                "engine_version": cls.installed_version(),
                "patch": patch.name,
                "gates_on": f"{patch.engine} {version or 'not installed'}",
                "range": patch.versions,
                "in_range": patch.applies_to(version),
            }
            if entry["in_range"]:
                entry["targets"] = drift([patch])
                if patch.check is None:
                    entry["needed"] = "cannot run the unpatched path here"
                else:
                    try:
                        entry["needed"] = (
                            "yes: the unpatched path still fails" if patch.check() else "no: upstream works unpatched"
                        )
                    except Exception as exc:  # noqa: BLE001
                        entry["needed"] = f"check failed: {type(exc).__name__}: {str(exc)[:200]}"
                        entry["traceback"] = traceback.format_exc()[-1500:]
            out.append(entry)
    return out


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1:] or None)))
