PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DATA ?= ./var
PORT ?= 8470

.PHONY: run test lint bench bench-deps clean browser

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/leasegate serve --data $(DATA) --port $(PORT)

# The console's browser tests drive Debian's chromium (Playwright never downloads one).
browser:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }

test: $(VENV)/.installed-dev browser
	$(BIN)/python scripts/sync_sdk.py --check  # _sync/ is what scripts/sync_sdk.py writes
	$(BIN)/python scripts/sync_types.py --check  # _types.py is what /openapi.json says
	$(BIN)/ruff check leasegate tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder  # two workers, one file each (served tests keep their order), the slowest files first (tests/conftest.py SLOW_FILES)

lint: $(VENV)/.installed-dev
	$(BIN)/python scripts/sync_sdk.py --check  # _sync/ is what scripts/sync_sdk.py writes
	$(BIN)/python scripts/sync_types.py --check  # _types.py is what /openapi.json says
	$(BIN)/ruff check leasegate tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

# bench/peers.py's peers run on Debian's beanstalkd and redis-server (each started by
# the bench itself on a port of its own; their Python clients are in the `bench` extra,
# which `dev` includes). peers.py prints lifecycle.py's figures too, beside the peers'.
bench-deps:
	@command -v beanstalkd >/dev/null && command -v redis-server >/dev/null || \
		{ apt-get update -q && apt-get install -y -q beanstalkd redis-server; }

bench: $(VENV)/.installed-dev bench-deps
	$(BIN)/python bench/peers.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache
