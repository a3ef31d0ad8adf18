# The two commands of the README. Both set everything up on a fresh machine first.
.PHONY: demo test check bootstrap

bootstrap:
	./scripts/bootstrap

demo: bootstrap
	.venv/bin/polar demo

# Static checks (lint + import sorting, the package rules, types), then every test tier.
check: bootstrap
	.venv/bin/ruff check .
	.venv/bin/lint-imports --no-cache
	.venv/bin/mypy

test: check
	.venv/bin/python -m pytest
