"""pytest plugin (entry point `pytest11`, loaded wherever rlbridge is installed): registers the
conformance suite's marker, so that a backend package that imports the suite needs no setup."""


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: runs a real engine end to end (slow; run one at a time)")
