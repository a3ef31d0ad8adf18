"""The rollout API described as OpenAPI 3.1 (served at ``/openapi.json``): what clients and the
API fuzzer (schemathesis, tests/inproc/test_api_fuzz.py) work from. The request schema is the
pydantic model's own; responses name their shapes."""

from __future__ import annotations

import functools
from typing import Any

from pipeline.schemas import TaskRequest, TaskStatus

_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["type", "message"],
    "properties": {"type": {"type": "string"}, "message": {"type": "string"},
                   "fields": {"type": "array", "items": {"type": "object"}}}}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _json(ref: str, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


_TASK_ID = {"name": "task_id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
_SESSION_ID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
_COMMON = {"401": _error("missing or wrong API token"), "503": _error("Redis unavailable; retry")}


@functools.lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    task_schema = TaskRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    status_schema = TaskStatus.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = {"Error": _ERROR}
    for doc in (task_schema, status_schema):
        schemas.update(doc.pop("$defs", {}))
    schemas["TaskRequest"] = task_schema
    schemas["TaskStatus"] = status_schema
    schemas["Submitted"] = {"type": "object", "required": ["task_id", "status", "session_ids"], "properties": {
        "task_id": {"type": "string"}, "status": {"type": "string"},
        "session_ids": {"type": "array", "items": {"type": "string"}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "polar-rollout API", "version": "1"},
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/rollout/task/submit": {"post": {
                "operationId": "submit",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/TaskRequest"}}}},
                "responses": {"200": _json("Submitted"), "400": _error("invalid task: each field named"),
                              "409": _error("task id taken"), "413": _error("body too large"), **_COMMON}}},
            "/rollout/task/{task_id}": {
                "get": {"operationId": "status", "parameters": [_TASK_ID, {
                    "name": "results", "in": "query", "required": False, "schema": {"type": "string"}}],
                    "responses": {"200": _json("TaskStatus"), "404": _error("unknown task"), **_COMMON}},
                "delete": {"operationId": "cancel", "parameters": [_TASK_ID],
                           "responses": {"200": {"description": "cancelling"}, "404": _error("unknown task"),
                                         **_COMMON}}},
            "/rollout/session/{session_id}": {"get": {
                "operationId": "session_result", "parameters": [_SESSION_ID],
                "responses": {"200": _json("SessionResult"), "404": _error("no such finished session"), **_COMMON}}},
            "/rollout/session/{session_id}/completions": {"get": {
                "operationId": "session_completions", "parameters": [_SESSION_ID],
                "responses": {"200": {"description": "the session's raw completion records and failed calls"},
                              "404": _error("no such finished session"), **_COMMON}}},
            "/rollout/results/dead-letters": {"get": {
                "operationId": "dead_letters", "parameters": [{
                    "name": "count", "in": "query", "required": False, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "stream stats and dead-lettered entries"}, **_COMMON}}},
            "/rollout/status": {"get": {"operationId": "pipeline_status", "parameters": [{
                "name": "workers", "in": "query", "required": False, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "queues, READY, workers, the proxy pause"}, **_COMMON}}},
            "/metrics": {"get": {"operationId": "metrics",
                                 "responses": {"200": {"description": "Prometheus text: stage queues, in flight, "
                                                                     "READY, tasks, results stream"}, **_COMMON}}},
            # The trajectory viewer's JSON (pipeline/api/viewer): the bearer header, or the login cookie.
            "/viewer/session": {
                "post": {"operationId": "viewer_login", "security": [], "requestBody": {"required": True, "content": {
                    "application/json": {"schema": {"type": "object", "required": ["token"],
                                                    "properties": {"token": {"type": "string", "minLength": 1}}}}}},
                         "responses": {"200": {"description": "logged in: an HttpOnly cookie for the viewer's reads"},
                                       "400": _error("not {\"token\": \"...\"}"), "401": _error("wrong token")}},
                "delete": {"operationId": "viewer_logout", "security": [],
                           "responses": {"200": {"description": "the cookie is cleared"}}}},
            "/viewer/api/tasks": {"get": {"operationId": "viewer_tasks", "parameters": [{
                "name": "limit", "in": "query", "required": False, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "recent tasks"}, **_COMMON}}},
            "/viewer/api/task/{task_id}": {"get": {
                "operationId": "viewer_task", "parameters": [_TASK_ID],
                "responses": {"200": {"description": "a task and its sessions"}, "404": _error("unknown task"),
                              **_COMMON}}},
            "/viewer/api/session/{session_id}": {"get": {
                "operationId": "viewer_session", "parameters": [_SESSION_ID],
                "responses": {"200": {"description": "a session's view model: traces token by token, turns, "
                                                    "interstitials, tool-call spans, drift, a timeline"},
                              "404": _error("unknown session"), **_COMMON}}},
            "/health": {"get": {"operationId": "health", "security": [],
                                "responses": {"200": {"description": "ok"}, "503": {"description": "Redis down"}}}},
        },
    }
