"""WSGI entry point: ``gunicorn -k gevent proxy.wsgi:app`` (see ``polar proxy``)."""

from proxy.app import create_app

app = create_app()
