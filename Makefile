# The two entry points a newcomer needs (see README): `make serve` and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
DATA_DIR ?= ./data
LISTEN ?= 127.0.0.1:9092
PYTEST_ARGS ?=
# Bytecode written at install: a broker started where PYTHONDONTWRITEBYTECODE is set
# would otherwise compile every module on every start (~60 ms of its start-up).
COMPILE_BYTECODE = $(PYTHON) -m compileall -q pybroker pyspark_pybroker

.PHONY: serve test install install-test system-deps system-deps-test build bench clean

# `serve`, `test` and `bench` install only when a build input is newer than the last install
# (the pip install rebuilds the native modules in an isolated environment: ~30 s). Python
# sources need no reinstall: the editable install imports them from this checkout.
STAMP_DIR = .make
INSTALL_STAMP = $(STAMP_DIR)/installed
INSTALL_TEST_STAMP = $(STAMP_DIR)/installed-test
BUILD_INPUTS = pyproject.toml setup.py scripts/install-system-deps.sh \
	$(wildcard csrc/*.c csrc/*.h pybroker/_native/*.pyx pybroker/_native/*.pxd) \
	pybroker/_native/_uring_build.py
# A stamp vouches only for the interpreter that wrote it: when $(PYTHON) does not import
# pybroker from this checkout (another venv, an uninstall), the stamps are rebuilt. -E -P:
# neither PYTHONPATH nor the working directory may stand in for the install.
INSTALLED_FROM := $(shell $(PYTHON) -E -P -c 'import os, pybroker; \
	print(os.path.dirname(os.path.dirname(pybroker.__file__)))' 2>/dev/null)
ifneq ($(INSTALLED_FROM),$(CURDIR))
.PHONY: $(INSTALL_STAMP) $(INSTALL_TEST_STAMP)
endif

system-deps:
	bash scripts/install-system-deps.sh

system-deps-test:
	bash scripts/install-system-deps.sh --test

# editable_mode=compat: a plain path entry, so Spark finds the top-level pyspark_pybroker
# module with pkgutil.iter_modules() (the default editable finder hides it).
install: system-deps
	$(PIP) install -q -e . --config-settings editable_mode=compat
	$(COMPILE_BYTECODE)
	@mkdir -p $(STAMP_DIR) && touch $(INSTALL_STAMP)

# The extras include the package's own dependencies, so this install stands for both.
install-test: system-deps-test
	$(PIP) install -q -e '.[test,spark,bench]' --config-settings editable_mode=compat
	$(COMPILE_BYTECODE)
	@mkdir -p $(STAMP_DIR) && touch $(INSTALL_STAMP) $(INSTALL_TEST_STAMP)

$(INSTALL_STAMP): $(BUILD_INPUTS)
	$(MAKE) --no-print-directory install

$(INSTALL_TEST_STAMP): $(BUILD_INPUTS)
	$(MAKE) --no-print-directory install-test

# Rebuild the native modules in place after editing csrc/ or pybroker/_native/.
build:
	$(PYTHON) setup.py -q build_ext --inplace

# Bytecode of edited sources is refreshed at each start: compileall skips what is current.
# A quickstart broker answers a new group's first consumer at once rather than after
# Kafka's 3 s wait for more members (group.initial.rebalance.delay.ms, see README).
serve: $(INSTALL_STAMP)
	@$(COMPILE_BYTECODE)
	$(PYTHON) -m pybroker serve --data-dir $(DATA_DIR) --listen $(LISTEN) \
		--set group.initial.rebalance.delay.ms=0

test: $(INSTALL_TEST_STAMP)
	$(PYTHON) -m pytest -n 2 --dist worksteal -q --durations=15 $(PYTEST_ARGS)

bench: $(INSTALL_TEST_STAMP)
	$(PYTHON) -m pytest bench/micro --benchmark-only -q

clean:
	rm -rf build *.egg-info pybroker/_native/*.so pybroker/_native/*.c $(STAMP_DIR)
