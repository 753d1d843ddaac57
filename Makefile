# The two commands a newcomer runs: `make demo` and `make test` (see README.md).
VENV ?= .venv
PYTHON ?= python3
# torch first, pinned: on these machines torch==2.13.0 is a local CPU wheel; a bare `torch`
# pulled in by an engine would download a multi-GB CUDA build.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.rlbridge-installed

.PHONY: install demo test test-engines test-fast compat clean browser slurm

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(TORCH)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[trl,bench,test,import]' $(TORCH)
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/rlbridge train configs/quickstart.yaml

# The whole suite in timed phases (scripts/ci_test.py): install; the engine environments of the CI
# cells created in the background while the suite that needs none runs; then the tests that train an
# engine in its environment, and each cell's conformance tests, two jobs at once where memory allows.
# It prints every phase's time and the total (docs/contributing.md has the budget).
# The CI cells: the conformance suite inside the engine environments CI proves, the cells of
# compat_matrix/matrix.yaml with a `ci` field (CI_CELLS="engine==version ..." picks others, "none" none),
# each created on first use and cached in ~/.cache/rlbridge/envs. Results go to runs/ci-compat, not to
# the checked-in table.
CI_CELLS ?=
test:
	CI_CELLS="$(CI_CELLS)" VENV="$(VENV)" $(PYTHON) scripts/ci_test.py

# The engine cells alone, one after another (what `make test` runs in its cell phases).
test-engines: install
	@cells="$(CI_CELLS)"; [ -n "$$cells" ] || cells=$$($(BIN)/python -c \
	  "from rlbridge.envs.compat import ci_cells; print(' '.join(c['cell'] for c in ci_cells()))"); \
	for cell in $$cells; do \
	  RLBRIDGE_CI_CELLS=1 RLBRIDGE_COMPAT_RESULTS=runs/ci-compat $(BIN)/rlbridge compat run --engine $${cell%%==*} --version $${cell##*==} || exit 1; \
	done

# Headless Chromium for the HTML report's browser test (tests/test_telemetry.py), from the system
# packages; best effort: without it (no root, no apt) that one test is skipped and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "no chromium: the report's browser test will be skipped"; }

# A real Slurm for the launcher's tests (tests/test_slurm.py): Debian's slurm-wlm and munge, started
# on loopback by the tests themselves (scripts/slurm-local.sh); best effort, as for Chromium.
slurm:
	@command -v slurmctld >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  scripts/slurm-local.sh install >/dev/null || echo "no slurm: the Slurm launcher's tests will be skipped"; }

# Everything but the real engine runs (seconds).
test-fast: install
	$(BIN)/python -m pytest -q -ra -m "not engine"

clean:
	rm -rf $(VENV) runs .pytest_cache

# The whole compatibility matrix: one engine environment per cell (several GB, tens of minutes).
# Then the main environment's matrix_only tests (engines trained in their environments from here,
# the bench's native arms...), which CI's pytest phases leave out.
compat: install
	$(BIN)/rlbridge compat run
	$(BIN)/python -m pytest -q -ra -m matrix_only
