"""The rollout HTTP API (Flask). Served by gunicorn: ``pipeline.api.wsgi:app``."""
