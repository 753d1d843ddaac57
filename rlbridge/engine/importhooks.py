"""Post-import hooks: run a callback right after a module is first imported.

Engine patches must reach every engine process (Ray workers included) and must act on modules
when the engine imports them, not before. Adapters register callbacks here from a bootstrap module
that each engine process runs at start-up (see rlbridge_adapters.<engine>.boot).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable

_callbacks: dict[str, list[Callable]] = {}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _callbacks:
            return None
        sys.meta_path.remove(self)  # let the normal finders locate the module
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            # some packages (transformers) replace themselves in sys.modules with a lazy module
            current = sys.modules.get(fullname, module)
            for callback in _callbacks.pop(fullname, []):
                callback(current)

        loader.exec_module = exec_and_patch
        return spec


_finder = _Finder()


def when_imported(module_name: str, callback: Callable) -> None:
    """Call `callback(module)` once `module_name` is imported (now, if it already is). Registered
    while a patch applies, the callback counts for that patch's report (rlbridge.engine.patch_report):
    the patch has run in this process once one of its callbacks has."""
    from rlbridge.engine import patch_report

    owner = patch_report.owner()
    if owner is not None:
        patch_report.hook_registered(owner, module_name)
        inner = callback

        def callback(module, _inner=inner, _owner=owner, _name=module_name):
            with patch_report.acting_for(_owner):  # hooks it registers count for the same patch
                _inner(module)
            patch_report.hook_ran(_owner, _name)

    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
        return
    _callbacks.setdefault(module_name, []).append(callback)
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
