def proven_backend_here(config: dict) -> tuple[str | None, str]:
    """The backend of conftest.proven_backends(config) whose engine is installed here at the version CI proves
    (this is that engine's environment), else None, and the reason a test of `config` skips."""
    from tests.conftest import proven_backends

    proven = proven_backends(config)
    here = next((b.name for b in proven if b.installed_version() == b.default_version), None)
    return here, f"needs {' or '.join(f'{b.distribution} {b.default_version}' for b in proven)} installed here"
