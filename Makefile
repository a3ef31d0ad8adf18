# The two commands of the README. Both set everything up on a fresh machine first.
.PHONY: demo test check bootstrap

bootstrap:
	./scripts/bootstrap

demo: bootstrap
	.venv/bin/polar demo

# Static checks: lint + import sorting, the package rules, types.
check: bootstrap
	.venv/bin/ruff check .
	.venv/bin/lint-imports --no-cache
	.venv/bin/mypy

# Every test tier, in TEST_PROCESSES processes: a test module (or the modules of one
# xdist_group) runs whole in one process, so what it starts once is started once
# (tests/conftest.py: the scheduler).
TEST_PROCESSES ?= 2
test: check
	.venv/bin/python -m pytest -n $(TEST_PROCESSES) --dist loadgroup
