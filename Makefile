# Attention from Scratch: `make lab` opens the course, `make test` runs every test.
# Both create .venv on first use and install the pinned versions in requirements.lock into it (nothing global), then
# two distributions of this repository, editable: attnlab (the library and the exercise checkers, pyproject.toml) and
# attnlab-course (the course tooling and attnlab-check, course/pyproject.toml).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
NB     ?=

.PHONY: help install bytecode lab test unit notebooks learner check bench slides site guide release clean

help:
	@echo "make lab        open the course in JupyterLab"
	@echo "make test       run every test: unit, notebooks (nbval), grader, browser"
	@echo "make check NB=notebooks/02_masks.ipynb   check your exercises in one notebook"
	@echo "make learner    regenerate the learner notebooks from notebooks/solutions/"
	@echo "make notebooks  update each notebook's Colab cell, re-execute every notebook in place, then make learner"
	@echo "make bench      run the benchmarks in benchmarks/ (GRADING_BASELINE=DIR|REV: grading side by side with it)"
	@echo "make slides     one reveal.js deck per notebook in build/slides/ (offline)"
	@echo "make site       the course as a static website in build/site/, the instructor guide included"
	@echo "make release REPO=https://github.com/OWNER/NAME TAG=v0.2.0 [BRANCH=main]   point every link and Colab cell at a fork or a release"

$(STAMP): requirements.lock pyproject.toml course/pyproject.toml course/setup.py
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed, found " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e course
	touch $@

install: $(STAMP)

# The bytecode of this repository's own packages (pip compiles what it installs, not an editable source tree): with
# PYTHONDONTWRITEBYTECODE set, every kernel and grading process would compile attnlab again (0.2 s each). Only what
# changed is compiled again.
bytecode: install
	@$(BIN)/python -m compileall -q src >/dev/null

lab: install bytecode
	$(BIN)/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

test: install bytecode
	$(BIN)/python -m pytest -n auto --dist loadscope

unit: install bytecode
	$(BIN)/python -m pytest -n auto --dist loadscope src tests --ignore=tests/browser

check: install bytecode
	@test -n "$(NB)" || { echo "usage: make check NB=notebooks/02_masks.ipynb"; exit 2; }
	$(BIN)/attnlab-check "$(NB)"

notebooks: install
	$(BIN)/python -m attnlab_course.colab --write notebooks/solutions/*.ipynb notebooks/00_start_here.ipynb
	$(BIN)/python -m attnlab_course.timing --write notebooks/solutions/*.ipynb notebooks/00_start_here.ipynb
	$(BIN)/python -m attnlab_course.authoring execute notebooks/solutions/*.ipynb notebooks/00_start_here.ipynb
	$(MAKE) learner

learner: install
	$(BIN)/python -m attnlab_course.authoring learner notebooks/solutions/*.ipynb
	$(BIN)/python -m attnlab_course.publish guide
	$(BIN)/python -m attnlab_course.release

bench: install bytecode
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/grading.py $(if $(GRADING_BASELINE),--baseline $(GRADING_BASELINE))

slides: install
	$(BIN)/python -m attnlab_course.publish slides --out build/slides

site: install
	$(BIN)/python -m attnlab_course.publish site --out build/site

guide: install
	$(BIN)/python -m attnlab_course.publish guide

# where the course lives (pyproject.toml) and everything generated from it: docs/publishing.md
release: install
	$(BIN)/python -m attnlab_course.release $(if $(REPO),--repository "$(REPO)") $(if $(TAG),--tag "$(TAG)") $(if $(BRANCH),--branch "$(BRANCH)")

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis src/*.egg-info build course/build
