# flexarm — the README's commands. Everything runs inside .venv + the colcon workspace (env.sh).
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := set -o pipefail; . ./env.sh &&
PYTEST_ARGS ?=

.PHONY: help setup test demo bench clean

help:
	@echo "make setup  - create .venv (ROS 2 wheels + pinned deps) and colcon-build the workspace"
	@echo "make demo   - the De Luca arm's tip on its path (tip_tracking, ROS 2 nodes, lock-step): summary, out/demo.png, out/demo.mcap"
	@echo "make test   - setup, then the whole test suite (all packages + system tests)"
	@echo "make bench  - run the benchmarks and print tables"

setup:
	@bash scripts/setup.sh

test: setup
	@$(ENV) python -m pytest -c pytest.ini $(PYTEST_ARGS)

DEMO_OUT ?= out
demo: setup
	@mkdir -p $(DEMO_OUT)
	@$(ENV) flexarm run --arm deluca_two_link --controller tip_tracking --duration 6 --time-mode lockstep \
		--record $(DEMO_OUT)/demo.mcap --plot $(DEMO_OUT)/demo.png

bench: setup
	@$(ENV) python bench/run_all.py

clean:
	rm -rf build install log .cache
