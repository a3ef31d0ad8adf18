"""Checks of the deployment recipes (infra/compose, infra/k8s, infra/images/polar), offline.

Each check takes the parsed recipe (so a test can hand it a broken copy) and returns the
problems it found as readable strings; an empty list means the recipe passed. Schemas: the
Compose Specification as vendored by check-jsonschema (PyPI), Kubernetes' own per-version
schemas as shipped by kubernetes-validate (PyPI), and KEDA's fields as described in
tests/fixtures/keda/keda-subset.schema.json (written from KEDA's documentation).
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shlex
from pathlib import Path
from typing import Any, Iterable

import click
import jsonschema
import kubernetes_validate
import yaml

from infra.cli.main import cli
from pipeline.settings import NOT_SETTINGS, setting_variables

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_DIR = ROOT / "infra" / "compose"
K8S_DIR = ROOT / "infra" / "k8s"
CONTAINERFILE = ROOT / "infra" / "images" / "polar" / "Containerfile"
KEDA_SCHEMA = ROOT / "tests" / "fixtures" / "keda" / "keda-subset.schema.json"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the manifests are meant for
POLAR_IMAGE = "localhost/polar"
SECRET_NAMES = ("POLAR_API_TOKEN", "POLAR_ADMIN_TOKEN", "POLAR_FLOWER_BASIC_AUTH", "POLAR_CALLBACK_SECRET",
                "REDIS_PASSWORD")


# --- parsing -----------------------------------------------------------------------------------

def load_yaml_docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def k8s_documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        out += [(path.name, doc) for doc in load_yaml_docs(path)]
    return out


_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str] | None = None) -> Any:
    """Compose's variable interpolation (${VAR}, ${VAR:-default}, $$), with ``env`` or the defaults."""
    env = env or {}
    if isinstance(value, str):
        return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


# --- schemas -----------------------------------------------------------------------------------

def compose_schema() -> dict[str, Any]:
    files = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(files.read_text())


def compose_schema_errors(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(compose_schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]


def keda_schema_errors(doc: dict[str, Any]) -> list[str]:
    defs = json.loads(KEDA_SCHEMA.read_text())["$defs"]
    if doc.get("kind") not in defs:
        return [f"{_where(doc)}: no KEDA schema for kind {doc.get('kind')!r}"]
    validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{doc['kind']}", "$defs": defs})
    problems = [f"{_where(doc)}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(doc)]
    hpa = ((doc.get("spec") or {}).get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}
    if "behavior" in hpa:  # what KEDA copies into the HPA it creates: check it as an HPA
        problems += k8s_schema_errors({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                                       "metadata": {"name": "x"}, "spec": {
                                           "scaleTargetRef": {"kind": "Deployment", "name": "x"},
                                           "maxReplicas": 1, "behavior": hpa["behavior"]}})
    return problems


def k8s_schema_errors(doc: dict[str, Any]) -> list[str]:
    """Kubernetes' own schema of the document's kind (strict: unknown fields fail), or KEDA's."""
    if str(doc.get("apiVersion", "")).startswith("keda.sh/"):
        return keda_schema_errors(doc)
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:  # a jsonschema error (message, path)
        return [f"{_where(doc)}: {'/'.join(map(str, exc.absolute_path))}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"{_where(doc)}: no Kubernetes {K8S_VERSION} schema for {doc.get('apiVersion')}/{doc.get('kind')}"]
    return []


def _where(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


# --- the polar command line ----------------------------------------------------------------------

def polar_argv_problem(argv: list[str]) -> str | None:
    """Parse ``polar <argv>`` with the real click CLI (types, choices, required options) without
    running anything; a renamed option or subcommand is a problem."""
    cmd: click.Command = cli
    name, args, parent = "polar", list(argv), None
    try:
        while True:
            ctx = cmd.make_context(name, args, parent=parent)
            if not isinstance(cmd, click.Group):
                return None
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                return f"polar {' '.join(argv)}: no subcommand"
            sub_name, sub, args = cmd.resolve_command(ctx, rest)
            if sub is None:
                return f"polar {' '.join(argv)}: unknown command {rest[0]!r}"
            name, cmd, parent = sub_name or rest[0], sub, ctx
    except click.ClickException as exc:
        return f"polar {' '.join(argv)}: {exc.format_message()}"


def option_value(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg in names and i + 1 < len(argv):
            return argv[i + 1]
    return None


# --- settings and secrets ----------------------------------------------------------------------

_POLAR_NAME = re.compile(r"\bPOLAR_[A-Z0-9_]*[A-Z0-9]\b")


def unknown_polar_names(text: str) -> set[str]:
    """POLAR_* names in a recipe that are not settings (every service refuses those). The names a
    runtime gives an agent (POLAR_SESSION_DIR in a task's command) are not settings either, and
    the settings module knows them as such; a service environment gets the strict check
    (compose_problems, k8s_problems)."""
    return set(_POLAR_NAME.findall(text)) - setting_variables() - NOT_SETTINGS


_REDIS_PASSWORD_IN_URL = re.compile(r"rediss?://[^\s@/]*:(?![<$])[^\s@/<$]+@")


def plaintext_secret_problems(name: str, text: str) -> list[str]:
    """A secret with a value written into a recipe (an env file stays out of the repository)."""
    problems = []
    if _REDIS_PASSWORD_IN_URL.search(text):
        problems.append(f"{name}: a Redis URL with a password")
    for secret in SECRET_NAMES:
        for m in re.finditer(rf"\b{secret}\b[ \t]*[:=][ \t]*([^\s#]*)", text):
            value = m.group(1).strip("\"'")
            # empty, a <placeholder>, or made at run time ($(rand), ${VAR}) is no secret value
            if value and not value.startswith("<") and "$" not in value:
                problems.append(f"{name}: {secret} has a value")
    return problems


def env_items(env: Any) -> dict[str, str]:
    if isinstance(env, list):
        return dict(str(e).partition("=")[::2] for e in env)
    return {str(k): "" if v is None else str(v) for k, v in (env or {}).items()}


def args_of(command: Any) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command or []]


def iter_containers(docs: Iterable[tuple[str, dict[str, Any]]]) -> Iterable[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload document, container) for every container of every Deployment/StatefulSet."""
    for _, doc in docs:
        if doc.get("kind") in ("Deployment", "StatefulSet"):
            for c in doc["spec"]["template"]["spec"].get("containers", []):
                yield doc, c


# --- cross-checks against the code ----------------------------------------------------------------

def compose_problems(doc: dict[str, Any]) -> list[str]:
    """What the Compose schema cannot know: commands, settings, stages, shared values, health."""
    from infra.stack import STAGE_CONCURRENCY
    from pipeline.status import Stage

    doc = interpolate(doc)
    services = doc.get("services") or {}
    problems, stage_services, shared = [], {}, {}
    for name, svc in services.items():
        if not str(svc.get("image", "")).startswith(POLAR_IMAGE):
            continue
        argv = args_of(svc.get("command"))
        if svc.get("entrypoint"):
            problems.append(f"{name}: the polar image's entrypoint (polar) is overridden")
        if (why := polar_argv_problem(argv)) is not None:
            problems.append(f"{name}: {why}")
        env = env_items(svc.get("environment"))
        if bad := sorted(n for n in env if n.startswith("POLAR_") and n not in setting_variables()):
            problems.append(f"{name}: not settings: {', '.join(bad)}")
        for key in ("POLAR_VISIBILITY_TIMEOUT_SECONDS", "POLAR_READY_CAPACITY"):
            shared.setdefault(key, {})[name] = env.get(key)
        if argv[:1] == ["worker"]:
            stage = option_value(argv, "--stage")
            stage_services.setdefault(stage, []).append(name)
            concurrency = option_value(argv, "-c", "--concurrency")
            if stage in {s.value for s in Stage} and concurrency != str(STAGE_CONCURRENCY[Stage(stage)]):
                problems.append(f"{name}: -c {concurrency}, infra/stack.py runs {stage} with "
                                f"{STAGE_CONCURRENCY[Stage(stage)]}")
            soft = float(option_value(argv, "--soft-shutdown-timeout") or 10)
            if _seconds(svc.get("stop_grace_period", "10s")) <= soft:
                problems.append(f"{name}: stop_grace_period does not exceed --soft-shutdown-timeout {soft:g}")
        elif "healthcheck" not in svc:
            problems.append(f"{name}: no healthcheck")
    for stage in Stage:
        if not stage_services.get(stage.value):
            problems.append(f"no worker service for the {stage.value} queue")
    for key, values in shared.items():
        if None in values.values() or len(set(values.values())) != 1:
            problems.append(f"{key} differs between services: {values}")
    redis = services.get("redis") or {}
    if "healthcheck" not in redis:
        problems.append("redis: no healthcheck")
    return problems


def _seconds(value: Any) -> float:
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?", str(value))
    if not m or not any(m.groups()):
        return float(value)
    h, mi, s = (int(g or 0) for g in m.groups())
    return h * 3600 + mi * 60 + s


def redis_conf_problems(name: str, text: str) -> list[str]:
    lines = {ln.split(None, 1)[0]: ln.split(None, 1)[1].strip() for ln in text.splitlines()
             if ln.strip() and not ln.lstrip().startswith("#") and len(ln.split(None, 1)) == 2}
    want = {"appendonly": "yes", "maxmemory-policy": "noeviction"}
    return [f"{name}: {k} is {lines.get(k)!r}, not {v!r}" for k, v in want.items() if lines.get(k) != v]


def k8s_problems(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Stages, queues, KEDA triggers, commands, settings and references across the manifests."""
    from pipeline.status import Stage
    from pipeline.stores.queues import priority_lists

    problems: list[str] = []
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for _, doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    configmaps, secrets = by_kind.get("ConfigMap", {}), by_kind.get("Secret", {})
    settings_cm = configmaps.get("polar-settings", {}).get("data", {})
    if bad := sorted(k for k in settings_cm if k not in setting_variables()):
        problems.append(f"ConfigMap/polar-settings: not settings: {', '.join(bad)}")
    if sensitive := sorted(k for k in settings_cm if k in SECRET_NAMES or k == "POLAR_REDIS_URL"):
        problems.append(f"ConfigMap/polar-settings holds secrets: {', '.join(sensitive)}")
    vt = float(settings_cm.get("POLAR_VISIBILITY_TIMEOUT_SECONDS", 4 * 3600))
    workers: dict[str, dict[str, Any]] = {}
    for workload, c in iter_containers(docs):
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        for ref in c.get("envFrom", []):
            for kind, pool in (("configMapRef", configmaps), ("secretRef", secrets)):
                if kind in ref and ref[kind]["name"] not in pool:
                    problems.append(f"{where}: {kind} {ref[kind]['name']} does not exist")
        if not str(c.get("image", "")).startswith(POLAR_IMAGE):
            continue
        argv = [str(a) for a in c.get("args", [])]
        if c.get("command"):
            problems.append(f"{where}: the polar image's entrypoint (polar) is overridden")
        if (why := polar_argv_problem(argv)) is not None:
            problems.append(f"{where}: {why}")
        if argv[:1] == ["worker"]:
            workers[option_value(argv, "--stage") or ""] = workload
            soft = float(option_value(argv, "--soft-shutdown-timeout") or 10)
            grace = workload["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
            if not soft < grace <= vt:
                problems.append(f"{where}: needs --soft-shutdown-timeout ({soft:g}) < terminationGracePeriodSeconds "
                                f"({grace}) <= the visibility timeout ({vt:g})")
        elif c.get("ports") and "httpGet" not in (c.get("readinessProbe") or {}):
            problems.append(f"{where}: no HTTP readiness probe")
    scaled = {so["spec"]["scaleTargetRef"]["name"]: so for so in by_kind.get("ScaledObject", {}).values()}
    auths = by_kind.get("TriggerAuthentication", {})
    for auth in auths.values():
        for ref in auth["spec"].get("secretTargetRef", []):
            if ref["key"] not in (secrets.get(ref["name"], {}).get("stringData") or {}):
                problems.append(f"TriggerAuthentication/{auth['metadata']['name']}: no key {ref['key']} "
                                f"in Secret {ref['name']}")
    for stage in Stage:
        deploy = workers.get(stage.value)
        if deploy is None:
            problems.append(f"no Deployment runs `polar worker --stage {stage.value}`")
            continue
        so = scaled.get(deploy["metadata"]["name"])
        if so is None:
            problems.append(f"no ScaledObject scales {deploy['metadata']['name']}")
            continue
        # INIT messages carry the task's dispatch_priority: kombu keeps them in priority lists.
        want = set(priority_lists(stage.queue)) if stage is Stage.INIT else {stage.queue}
        triggers = so["spec"]["triggers"]
        lists = {t["metadata"].get("listName") for t in triggers if t["type"] == "redis"}
        if lists != want:
            problems.append(f"ScaledObject/{so['metadata']['name']}: listName {sorted(map(repr, lists))}, "
                            f"the {stage.value} queue's messages wait in {sorted(map(repr, want))}")
        if so["spec"].get("minReplicaCount", 0) < 1:
            problems.append(f"ScaledObject/{so['metadata']['name']}: minReplicaCount below 1 (KEDA sees only "
                            "waiting messages: running stages would be scaled away, and no reaper would run)")
        for t in triggers:
            ref = (t.get("authenticationRef") or {}).get("name")
            if ref not in auths:
                problems.append(f"ScaledObject/{so['metadata']['name']}: authenticationRef {ref!r} does not exist")
    return problems
