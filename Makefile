# Two commands on a fresh machine:
#   make demo  — venv with the default install (what search needs), index this repo, ask a question
#   make test  — venv with the test, eval and external extras + the node fixture, run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
QUESTION ?= where is the receipt signature verified
# one stamp per install level: `make demo` stays lean, `make test` adds the extras on top
SEARCH := $(VENV)/.installed-search
DEV := $(VENV)/.installed-dev

.PHONY: demo test lint install install-search clean

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
tests/fixtures/node/node_modules: tests/fixtures/node/package-lock.json
	@command -v npm >/dev/null || { echo "make test needs Node.js >= 20 with npm (the npm MCP server fixture): e.g. apt-get install nodejs npm" >&2; exit 1; }
	npm ci --silent --no-audit --no-fund --prefix tests/fixtures/node
	@touch $@

lint: install
	$(BIN)/ruff check engine tests benchmarks scripts
	$(BIN)/ruff format --check engine tests benchmarks scripts
	$(BIN)/mypy

test: install tests/fixtures/node/node_modules lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .engine
