"""Post-import hooks, which carry engine patches into every engine process."""

import sys
import textwrap

from rlbridge.engine.importhooks import when_imported


def test_callback_runs_once_after_first_import_and_sees_the_final_module(tmp_path, monkeypatch):
    (tmp_path / "rlb_hook_demo.py").write_text(
        textwrap.dedent("""
        import sys, types
        VALUE = 1
        class _Lazy(types.ModuleType):
            VALUE = 2
        # like transformers: the package replaces itself in sys.modules at the end of its import
        sys.modules[__name__] = _Lazy(__name__)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported("rlb_hook_demo", lambda m: seen.append(m.VALUE))
    assert seen == []
    import rlb_hook_demo  # noqa: F401

    assert seen == [2]
    sys.modules.pop("rlb_hook_demo")
    import rlb_hook_demo  # noqa: F401,F811  (a second import does not call it again)

    assert seen == [2]


def test_callback_runs_at_once_for_an_imported_module():
    seen = []
    when_imported("json", lambda m: seen.append(m.__name__))
    assert seen == ["json"]
