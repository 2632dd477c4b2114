# The two entry points a newcomer needs (see README): `make serve` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
DATA_DIR ?= ./data
LISTEN ?= 127.0.0.1:9092
PYTEST_ARGS ?=
# Bytecode written at install: a broker started where PYTHONDONTWRITEBYTECODE is set
# would otherwise compile every module on every start (~60 ms of its start-up).
COMPILE_BYTECODE = $(PYTHON) -m compileall -q pybroker pyspark_pybroker

.PHONY: serve test install install-test system-deps build bench clean

system-deps:
	bash scripts/install-system-deps.sh

# editable_mode=compat: a plain path entry, so Spark finds the top-level pyspark_pybroker
# module with pkgutil.iter_modules() (the default editable finder hides it).
install: system-deps
	$(PIP) install -q -e . --config-settings editable_mode=compat
	$(COMPILE_BYTECODE)

install-test: system-deps
	$(PIP) install -q -e '.[test,spark,bench]' --config-settings editable_mode=compat
	$(COMPILE_BYTECODE)

# Rebuild the native modules in place after editing csrc/ or pybroker/_native/.
build:
	$(PYTHON) setup.py -q build_ext --inplace

serve: install
	pybroker serve --data-dir $(DATA_DIR) --listen $(LISTEN)

test: install-test
	$(PYTHON) -m pytest -n 2 -q --durations=15 $(PYTEST_ARGS)

bench: install-test
	$(PYTHON) -m pytest bench/micro --benchmark-only -q

clean:
	rm -rf build *.egg-info pybroker/_native/*.so pybroker/_native/*.c
