"""pytest plugin (entry point `pytest11`, loaded wherever rlbridge is installed): registers the
conformance suite's markers, so that a backend package that imports the suite needs no setup."""


def pytest_configure(config):
    config.addinivalue_line("markers", "engine: runs a real engine end to end (slow; run one at a time)")
    config.addinivalue_line(
        "markers",
        "plans_only: plans without the engine, so the suite's `backend` fixture gives "
        "every registered backend, installed here or not",
    )
    config.addinivalue_line(
        "markers",
        "matrix_only: broader engine coverage, run by `make compat` but not by CI's cells "
        "(RLBRIDGE_CI_CELLS=1), which keep one end-to-end run per engine seam",
    )
