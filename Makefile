# The two commands of the README. Both set everything up on a fresh machine first.
.PHONY: demo test bootstrap

bootstrap:
	./scripts/bootstrap

demo: bootstrap
	.venv/bin/polar demo

test: bootstrap
	.venv/bin/ruff check .
	.venv/bin/python -m pytest
