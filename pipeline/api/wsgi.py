"""WSGI entry point: ``gunicorn pipeline.api.wsgi:app`` (see ``polar api``)."""

from pipeline.api.app import create_app

app = create_app()
