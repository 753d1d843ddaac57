# The two commands a newcomer runs: `make demo` and `make test` (see README.md).
VENV ?= .venv
PYTHON ?= python3
# torch first, pinned: on these machines torch==2.13.0 is a local CPU wheel; a bare `torch`
# pulled in by an engine would download a multi-GB CUDA build.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.rlbridge-installed

.PHONY: install demo test test-fast compat clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check $(TORCH)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[trl,test]' $(TORCH)
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/rlbridge train configs/quickstart.yaml

test: install
	$(BIN)/python -m pytest -q -ra

# Everything but the real engine runs (seconds).
test-fast: install
	$(BIN)/python -m pytest -q -ra -m "not engine"

clean:
	rm -rf $(VENV) runs .pytest_cache

# The whole compatibility matrix: one engine environment per cell (several GB, tens of minutes).
compat: install
	$(BIN)/rlbridge compat run
