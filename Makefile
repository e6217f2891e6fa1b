# Two commands on a fresh machine:
#   make demo  — venv with the default install (what search needs), index this repo, ask a question
#   make test  — venv with the test, eval and external extras, Node's npm fixture and Chromium for
#                the browser tests (installed from apt when missing), then lint and the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
QUESTION ?= where is the receipt signature verified
# one stamp per install level: `make demo` stays lean, `make test` adds the extras on top
SEARCH := $(VENV)/.installed-search
DEV := $(VENV)/.installed-dev

.PHONY: demo test lint install install-search browser node postgres ui-shots clean
CHROMIUM := /usr/bin/chromium
PG_INITDB := $(firstword $(wildcard /usr/lib/postgresql/*/bin/initdb) /usr/lib/postgresql/15/bin/initdb)

$(SEARCH): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $@

$(DEV): $(SEARCH)
	$(BIN)/pip install -q -e '.[test,eval,external]'
	@touch $@

install-search: $(SEARCH)

# what lint and test need: the default install plus the test, eval and external extras
install: $(DEV)

demo: install-search
	$(BIN)/engine index --wait --workspace .
	$(BIN)/engine run pipelines/router.yaml --workspace . -q "$(QUESTION)" --format markdown --limit 5

# a third-party MCP server (npm @modelcontextprotocol/server-filesystem) the tests run for real
# npm comes from apt when missing (needs root, like Chromium below; elsewhere `sudo apt-get install nodejs npm`)
node:
	@command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } \
	  || { echo "make test needs Node.js >= 20 with npm (the npm MCP server fixture): apt-get install nodejs npm" >&2; exit 1; }

tests/fixtures/node/node_modules: tests/fixtures/node/package-lock.json | node
	npm ci --silent --no-audit --no-fund --prefix tests/fixtures/node
	@touch $@

# the web UI's browser tests (tests/ui, docs/ui.md): Debian's Chromium driven by Playwright's Python
# API (the `browser` extra); Playwright's own browser download (`playwright install`) is never used.
# apt-get needs root (CI runs as root; elsewhere run `sudo apt-get install chromium` once).
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

$(VENV)/.browser-extra: pyproject.toml $(DEV)
	$(BIN)/pip install -q -e '.[browser]'
	@touch $@

browser: $(CHROMIUM) $(VENV)/.browser-extra

# the PostgreSQL store's and the scale tests' servers (docs/adr/0016-postgresql.md): Debian's
# postgresql (the store) and the pgserver wheel (PostgreSQL + pgvector, the vector backend; Debian 12
# packages no pgvector); the tests start throwaway clusters from them (tests/pg_support.py).
# Ray for `engine index --executor ray`. apt-get needs root (CI runs as root).
$(PG_INITDB):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql

$(VENV)/.scale-extras: pyproject.toml $(DEV)
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
