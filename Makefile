# pyrope: the two commands that do all set-up on a fresh machine are
#   make demo   -- install the package and run the main demonstration
#   make test   -- install what the tests need and run the whole suite
PYTHON ?= python3
PIP = $(PYTHON) -m pip --disable-pip-version-check

.PHONY: demo test install install-test install-bench build bench clean

install:            ## the package, editable, with its runtime dependencies
	$(PIP) install --quiet -e .

install-test:       ## the package plus everything the tests need
	$(PIP) install --quiet -e ".[test]"

demo: install
	$(PYTHON) -m pyrope demo

test: install-test
	$(PYTHON) -m pytest -q

build:              ## build the C extension in place (no install)
	$(PYTHON) pyrope/_build.py

install-bench:      ## the package plus the benchmark peers (torch, onnxruntime, ml_dtypes)
	$(PIP) install --quiet -e ".[test,bench]"

bench: install-bench
	$(PYTHON) -m pytest bench -q --benchmark-only --benchmark-columns=median,iqr,rounds

clean:
	rm -rf build *.egg-info pyrope/_pyrope_cffi* .pytest_cache .benchmarks
