# All set-up happens here: `make demo` and `make test` work from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
# CPU wheel by default; on a GPU cluster keep your own: make test TORCH_SPEC=
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck clean venv browser

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(BIN)/python -m pip install -q "$(TORCH_SPEC)"; fi
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# The browser tests render every HTML page kind in Debian's chromium: installed here
# when missing (as root, with apt-get); where it cannot be, they are skipped, saying why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && \
		apt-get install -y -q chromium >/dev/null; }; }; } || \
		echo "chromium could not be installed: the browser tests will be skipped"

test: $(STAMP) lint typecheck browser
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/commlens demo

clean:
	rm -rf $(VENV) runs build *.egg-info
