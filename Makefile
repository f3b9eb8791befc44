# kubegpu.fleet — every entry point creates what it needs itself.
#   make demo   main job: audit and remediate the embedded lab fleet
#   make test   everything CI runs: sanity, units, module tests, lint, integration
#   make matrix sanity subset + unit tests on every older ansible-core the collection claims
#   make lab-dist  the GPU node lab as a wheel + sdist (.build/lab-dist), outside the Galaxy artifact
SHELL        := /bin/bash
.SHELLFLAGS  := -eu -o pipefail -c
PYTHON       ?= python3
VENV         := $(CURDIR)/.venv
BIN          := $(VENV)/bin
BUILD        := $(CURDIR)/.build
STAMP        := $(VENV)/.installed
COLL_PATH    := $(BUILD)/collections
COLL_LINK    := $(COLL_PATH)/ansible_collections/kubegpu/fleet
SANITY_DIR   ?= $(BUILD)/sanity
SANITY_TREE  := $(SANITY_DIR)/ansible_collections/kubegpu/fleet
PYTEST_ARGS  ?= -n 2
LAB_PYTEST_ARGS ?= -n 3 --dist loadfile
export ANSIBLE_COLLECTIONS_PATH := $(COLL_PATH)
export ANSIBLE_PYTHON_INTERPRETER := $(BIN)/python
export PATH := $(BIN):$(PATH)

.PHONY: help deps venv tree pip-bootstrap molecule demo-down sanity units units-ansible-test modules lint integration test demo bench clean
.PHONY: lab-dist matrix matrix-one galaxy-importer docs-lint changelog-lint changelog

help:
	@sed -n 's/^#   //p' Makefile

# Debian packages the tests drive for real: shellcheck (sanity), debootstrap/systemd-nspawn/
# dpkg-dev/apt-utils (GPU node lab), chromium (HTML report test), prometheus (promtool).
APT_PKGS     := shellcheck dnf rpm createrepo-c debootstrap systemd-container dpkg-dev apt-utils openssh-client chromium prometheus
deps:
	@missing=$$(for p in $(APT_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "need root to apt-get install:$$missing" >&2; exit 1; fi; \
	  echo "apt-get install$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(STAMP): requirements-dev.txt lab/pyproject.toml lab/hatch_build.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt
	# the lab, editable: its Molecule driver (entry point) for molecule/*, its code from lab/
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e lab
	touch $@

venv: $(STAMP)

# ansible needs the path ansible_collections/kubegpu/fleet; the checkout may live anywhere.
tree: $(STAMP)
	mkdir -p $(dir $(COLL_LINK))
	ln -sfn $(CURDIR) $(COLL_LINK)

# ansible-test refuses symlinked trees, so sanity runs on a copy of the tracked files.
# Every Python 3.8+ found on the machine is offered to ansible-test (module targets are 3.8+).
# ansible-test's own sanity requirements, pinned by ansible-test itself.
SANITY_VENV  := $(BUILD)/sanity-venv
SANITY_REQS  := $(VENV)/lib/python3.11/site-packages/ansible_test/_data/requirements
PIP_BOOT_VER := $$($(BIN)/python -c "import re,ansible_test,os;print(re.search(r\"pip='([0-9.]+)'\",open(os.path.join(os.path.dirname(ansible_test.__file__),'_internal','python_requirements.py')).read()).group(1))")
ATEST_CACHE  := $(HOME)/.ansible/test/cache

$(SANITY_VENV)/.installed: $(STAMP) requirements-dev.txt
	$(PYTHON) -m venv $(SANITY_VENV)
	$(SANITY_VENV)/bin/pip install -q --disable-pip-version-check \
	  "$$(grep -E '^ansible-core==' requirements-dev.txt)" $$(for f in $(SANITY_REQS)/sanity.*.txt; do echo -r $$f; done)
	touch $@

# ansible-test bootstraps pip in its test venvs from an unreachable host: give it the
# equivalent (scripts/ansible_test_get_pip.py + the pip wheel from PyPI).
pip-bootstrap: $(STAMP)
	v=$(PIP_BOOT_VER); mkdir -p $(ATEST_CACHE); \
	[ -f $(ATEST_CACHE)/pip-$$v-py3-none-any.whl ] || \
	  $(BIN)/pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d $(ATEST_CACHE) "pip==$$v" \
	    setuptools wheel; \
	cp scripts/ansible_test_get_pip.py $(ATEST_CACHE)/get_pip_$${v//./_}.py

sanity: $(SANITY_VENV)/.installed pip-bootstrap
	rm -rf $(SANITY_DIR) && mkdir -p $(SANITY_TREE) $(BUILD)/pythons
	git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} $(SANITY_TREE)/
	for p in /root/.pyenv/versions/3.*/bin/python3.[0-9]* /usr/bin/python3.[0-9]*; do \
	  case "$$p" in *-config|*m) continue;; esac; \
	  [ -x "$$p" ] && ln -sfn "$$p" $(BUILD)/pythons/$$(basename $$p) || true; done
	cd $(SANITY_TREE) && git init -q && git add -A && \
	  PATH=$(SANITY_VENV)/bin:$(BUILD)/pythons:$$PATH $(SANITY_VENV)/bin/ansible-test sanity --color=no $(SANITY_ARGS)

units: tree
	$(BIN)/pytest -q -p no:cacheprovider tests/unit lab/tests $(PYTEST_ARGS)

# The same unit tests the way collections run them: `ansible-test units` on a copy of the tracked
# files (as sanity), in a venv of its own with tests/unit/requirements.txt, its collection loader
# importing every test as ansible_collections.kubegpu.fleet.tests.unit..., module_utils tests
# isolated from controller code.
UNITS_DIR    ?= $(BUILD)/units
UNITS_TREE   := $(UNITS_DIR)/ansible_collections/kubegpu/fleet
UNITS_ARGS   ?= --python 3.11 --num-workers 2
units-ansible-test: $(SANITY_VENV)/.installed pip-bootstrap
	rm -rf $(UNITS_DIR) && mkdir -p $(UNITS_TREE)
	git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} $(UNITS_TREE)/
	cd $(UNITS_TREE) && git init -q && git add -A && \
	  PATH=$(SANITY_VENV)/bin:$$PATH $(SANITY_VENV)/bin/ansible-test units --color=no --venv $(UNITS_ARGS)

modules: tree
	$(BIN)/pytest -q -p no:cacheprovider tests/module $(PYTEST_ARGS)

lint: tree
	$(BIN)/ansible-lint --profile production --offline

# Controller-side integration (reports in Chromium/promtool) and the GPU node lab
# (API double, booted nspawn nodes): both drive real tools end to end.
integration: tree
	$(BIN)/pytest -q -p no:cacheprovider tests/integration $(PYTEST_ARGS)
	$(BIN)/pytest -q -p no:cacheprovider tests/lab $(LAB_PYTEST_ARGS)

# Molecule scenarios on booted lab nodes (create/converge/idempotence/check/verify/destroy).
MOLECULE_SCENARIOS ?= lab-smoke audit remediate
molecule: deps tree
	for s in $(MOLECULE_SCENARIOS); do $(BIN)/molecule test -s $$s || exit 1; done

# The GPU node lab as a Python distribution (lab/pyproject.toml): wheel + sdist for other
# repositories' Molecule tests (docs/testing-your-roles.md).
LAB_DIST     := $(BUILD)/lab-dist
lab-dist: $(STAMP)
	rm -rf $(LAB_DIST)
	$(BIN)/python -m build --no-isolation --outdir $(LAB_DIST) lab

# Sanity and units on every ansible-core meta/runtime.yml claims: the pinned one (requirements-dev.txt)
# runs full sanity and the units above; `make matrix` runs each older one in venvs of its own (their
# pins conflict: one with ansible-core and its ansible-test sanity requirements, one with ansible-core,
# tests/unit/requirements.txt and the pytest that fits): every sanity test of that core on the
# controller's Python (MATRIX_SANITY; ansible-test installs the pylint/pep8 tools it pins in venvs of
# its own) and the unit tests. tests/config.yml tells every core the modules need Python 3.8+.
MATRIX_CORES  ?= 2.16.19 2.17.14 2.18.19 2.20.10
# units on every claimed core (about 3 minutes each on two cores)
MATRIX_UNITS_CORES ?= $(MATRIX_CORES)
# ansible-core 2.20 and later need Python 3.12 on the controller (pip offers them to nothing older):
# their venvs use the first Python 3.12 found (pyenv's, else the system's).
MATRIX_PY312  ?= $(firstword $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 /usr/local/bin/python3.12))
matrix_python = $(if $(filter 2.16.% 2.17.% 2.18.% 2.19.%,$(1)),python3.11,$(MATRIX_PY312))
matrix_pyver  = $(if $(filter 2.16.% 2.17.% 2.18.% 2.19.%,$(1)),3.11,3.12)
MATRIX_DIR    := $(BUILD)/matrix
MATRIX_SANITY ?=
MATRIX_SANITY_REQS := validate-modules ansible-doc yamllint runtime-metadata
$(MATRIX_DIR)/%/sanity/.installed: requirements-dev.txt
	rm -rf $(MATRIX_DIR)/$*/sanity
	$(call matrix_python,$*) -m venv $(MATRIX_DIR)/$*/sanity
	$(MATRIX_DIR)/$*/sanity/bin/pip install -q --disable-pip-version-check "ansible-core==$*"
	reqs=$$($(MATRIX_DIR)/$*/sanity/bin/python -c "import ansible_test,os;print(os.path.join(os.path.dirname(ansible_test.__file__),'_data','requirements'))"); \
	$(MATRIX_DIR)/$*/sanity/bin/pip install -q --disable-pip-version-check "ansible-core==$*" \
	  $$(for t in $(MATRIX_SANITY_REQS); do echo -r $$reqs/sanity.$$t.txt; done)
	touch $@
$(MATRIX_DIR)/%/units/.installed: requirements-dev.txt tests/unit/requirements.txt
	rm -rf $(MATRIX_DIR)/$*/units
	$(call matrix_python,$*) -m venv $(MATRIX_DIR)/$*/units
	$(MATRIX_DIR)/$*/units/bin/pip install -q --disable-pip-version-check "ansible-core==$*" \
	  -r tests/unit/requirements.txt pytest pytest-xdist $$(grep -E '^(jmespath|PyYAML)==' requirements-dev.txt)
	touch $@

matrix:
	for v in $(MATRIX_CORES); do $(MAKE) --no-print-directory matrix-one CORE=$$v || exit 1; done

# ansible-test of each core bootstraps its own pip (up to 2.17 also setuptools and wheel) in its test
# venvs (as pip-bootstrap does for the pinned core): the wheels from PyPI, our stand-in get-pip script.
MATRIX_BOOT = import re,ansible_test,os; t=open(os.path.join(os.path.dirname(ansible_test.__file__),'_internal','python_requirements.py')).read(); print(' '.join('%s==%s' % (n, m.group(1)) for n in ('pip','setuptools','wheel') for m in [re.search(n + r\"='([0-9.]+)'\", t)] if m))
MATRIX_UNITS = $(filter $(CORE),$(MATRIX_UNITS_CORES))
matrix-one: $(MATRIX_DIR)/$(CORE)/sanity/.installed $(if $(MATRIX_UNITS),$(MATRIX_DIR)/$(CORE)/units/.installed) tree
	pkgs="$$($(MATRIX_DIR)/$(CORE)/sanity/bin/python -c "$(MATRIX_BOOT)")"; v=$${pkgs%% *}; v=$${v#pip==}; \
	mkdir -p $(ATEST_CACHE); \
	[ -f $(ATEST_CACHE)/pip-$$v-py3-none-any.whl ] || \
	  $(BIN)/pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d $(ATEST_CACHE) $$pkgs; \
	cp scripts/ansible_test_get_pip.py $(ATEST_CACHE)/get_pip_$${v//./_}.py
	rm -rf $(MATRIX_DIR)/$(CORE)/tree && mkdir -p $(MATRIX_DIR)/$(CORE)/tree/ansible_collections/kubegpu/fleet
	git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} $(MATRIX_DIR)/$(CORE)/tree/ansible_collections/kubegpu/fleet/
	# both halves run; either failing fails the core
	rc=0; (cd $(MATRIX_DIR)/$(CORE)/tree/ansible_collections/kubegpu/fleet && git init -q && git add -A && \
	  PATH=$(MATRIX_DIR)/$(CORE)/sanity/bin:$$PATH $(MATRIX_DIR)/$(CORE)/sanity/bin/ansible-test sanity --color=no \
	    --python $(call matrix_pyver,$(CORE)) $(MATRIX_SANITY)) || rc=1; \
	$(if $(MATRIX_UNITS),PATH=$(MATRIX_DIR)/$(CORE)/units/bin:$$PATH ANSIBLE_PYTHON_INTERPRETER=$(MATRIX_DIR)/$(CORE)/units/bin/python \
	  $(MATRIX_DIR)/$(CORE)/units/bin/pytest -q -p no:cacheprovider tests/unit $(PYTEST_ARGS) || rc=1;) \
	echo "ansible-core $(CORE): $$( [ $$rc = 0 ] && echo passed || echo FAILED)"; exit $$rc

# What Automation Hub runs on an upload: galaxy-importer on the built tarball, in a venv of its own
# (it pins its own ansible-lint/ansible-builder ranges; the `ansible` package brings the collection's
# dependencies for its ansible-lint pass). Any ERROR line fails.
IMPORTER_VENV := $(BUILD)/importer-venv
GALAXY_IMPORTER := galaxy-importer==0.4.44
$(IMPORTER_VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(IMPORTER_VENV)
	$(IMPORTER_VENV)/bin/pip install -q --disable-pip-version-check "$(GALAXY_IMPORTER)" \
	  "$$(grep -E '^ansible-core==' requirements-dev.txt)" "$$(grep -E '^ansible==' requirements-dev.txt)"
	touch $@
# The tarball is built from the tracked files (as from a clean clone), like sanity's tree.
galaxy-importer: $(IMPORTER_VENV)/.installed
	rm -rf $(BUILD)/importer && mkdir -p $(BUILD)/importer/src
	git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} $(BUILD)/importer/src/
	$(BIN)/ansible-galaxy collection build --output-path $(BUILD)/importer $(BUILD)/importer/src
	cd $(BUILD)/importer && PATH=$(IMPORTER_VENV)/bin:$$PATH ANSIBLE_COLLECTIONS_PATH= \
	  $(IMPORTER_VENV)/bin/python -m galaxy_importer.main kubegpu-fleet-*.tar.gz 2>&1 | tee importer.log
	! grep -E '^(ERROR|CRITICAL)|ImporterError' $(BUILD)/importer/importer.log

# Collection docs as docs.ansible.com renders them (every plugin, role and reference) and the
# changelog fragments.
docs-lint: tree
	$(BIN)/antsibull-docs lint-collection-docs --plugin-docs .
changelog-lint: $(STAMP)
	$(BIN)/antsibull-changelog lint
# At a release: CHANGELOG.rst for galaxy.yml's version from the fragments (kept, recorded as released).
changelog: tree
	$(BIN)/antsibull-changelog release --update-existing --reload-plugins

test: deps sanity units modules lint changelog-lint docs-lint galaxy-importer matrix integration molecule

# Boots the seven-node lab (one node per seed failure mode, a GPU hardware fault and a healthy one; needs root),
# audits it, remediates it and prints the before/after reports. The lab stays up: `make demo-down` removes it.
demo: deps tree
	KUBEGPU_REMEDIATE_REPORT_DIR=$(CURDIR)/kubegpu-remediate $(BIN)/ansible-playbook lab/playbooks/demo.yml
	@echo; echo "=== before remediation ==="; sed -n '1,/^## /p' $(CURDIR)/kubegpu-remediate/before/kubegpu-audit.md
	@echo; echo "=== after remediation ==="; cat $(CURDIR)/kubegpu-remediate/after/kubegpu-audit.md
	@echo "HTML reports: $(CURDIR)/kubegpu-remediate/{before,after}/kubegpu-audit.html"

demo-down: tree
	PYTHONPATH=lab $(BIN)/python -m kubegpu_lab down --name demo

# Benchmarks (not part of test; needs root, boots a 20-node lab, 10-15 min): prints ratios against
# baselines run in the same invocation, writes bench/results/*.json and docs/benchmarks.md.
BENCH_ARGS   ?=
bench: deps tree
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(BUILD) tests/output
