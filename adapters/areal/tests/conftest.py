"""The fixtures of rlbridge's own test suite (tests/conftest.py: a private model cache per session, a fresh plugin
manager per test), for the AReaL adapter's tests, which live in its folder."""

from tests.conftest import _cache_dir, _fresh_plugin_manager  # noqa: F401
