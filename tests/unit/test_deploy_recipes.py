"""The deployment recipes are valid and agree with the code: the Compose file against the Compose
Specification (and `podman-compose config`), every Kubernetes manifest against Kubernetes' own
schema and KEDA's fields, every `polar` command line against the real CLI, every POLAR_* name
against the settings, every stage queue against its worker and its KEDA trigger. Each check is
also shown failing on a broken copy of the recipe. Offline and fast: nothing is started."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit import deploy_checks as dc

COMPOSE = dc.COMPOSE_DIR / "compose.yaml"
RECIPE_TEXTS = [*dc.COMPOSE_DIR.glob("*.yaml"), *dc.COMPOSE_DIR.glob("*.sh"), dc.COMPOSE_DIR / "secrets.env.example",
                *dc.K8S_DIR.glob("*.yaml"), dc.CONTAINERFILE]


@pytest.fixture(scope="module")
def compose() -> dict:
    (doc,) = dc.load_yaml_docs(COMPOSE)
    return doc


@pytest.fixture(scope="module")
def k8s() -> list:
    return dc.k8s_documents()


def _doc(docs: list, kind: str, name: str) -> dict:
    return next(d for _, d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


# --- Compose -------------------------------------------------------------------------------------

def test_compose_file_matches_the_compose_specification(compose):
    assert dc.compose_schema_errors(compose) == []


def test_compose_schema_check_fails_on_a_broken_copy(compose):
    broken = copy.deepcopy(compose)
    broken["services"]["proxy"]["deploy"]["replicas"] = [2]
    broken["services"]["api"]["restart_policy"] = "always"  # a misspelt key
    errors = dc.compose_schema_errors(broken)
    assert any("services/proxy/deploy/replicas" in e for e in errors), errors
    assert any("restart_policy" in e for e in errors), errors


def test_compose_recipe_agrees_with_the_code(compose):
    assert dc.compose_problems(compose) == []
    assert dc.redis_conf_problems("redis.conf", (dc.COMPOSE_DIR / "redis.conf").read_text()) == []


@pytest.mark.parametrize("breakage, expected", [
    (lambda d: d["services"]["worker-run"].update(command=["worker", "--stage", "run", "--concurency", "8"]),
     "No such option '--concurency'"),
    (lambda d: d["services"]["worker-init"].update(command=["worker", "--stage", "initialise"]),
     "'initialise' is not one of"),
    (lambda d: d["services"].pop("worker-evaluate"), "no worker service for the evaluate queue"),
    (lambda d: d["services"]["api"].update(command=["serve-api"]), "No such command 'serve-api'"),
    (lambda d: d["services"]["api"].update(environment={**d["x-polar-env"], "POLAR_READY_CAPACTY": "4"}),
     "not settings: POLAR_READY_CAPACTY"),
    (lambda d: d["services"]["flower"].update(environment={**d["x-polar-env"],
                                                            "POLAR_VISIBILITY_TIMEOUT_SECONDS": "60"}),
     "POLAR_VISIBILITY_TIMEOUT_SECONDS differs"),
    (lambda d: d["services"]["worker-postrun"].update(command=["worker", "--stage", "postrun", "-c", "9"]),
     "-c 9, infra/stack.py runs postrun with 2"),
    (lambda d: d["services"]["worker-run"].update(stop_grace_period="10s"),
     "stop_grace_period does not exceed --soft-shutdown-timeout"),
    (lambda d: d["services"]["proxy"].pop("healthcheck"), "proxy: no healthcheck"),
])
def test_compose_cross_checks_fail_on_a_broken_copy(compose, breakage, expected):
    broken = copy.deepcopy(compose)
    breakage(broken)
    problems = dc.compose_problems(broken)
    assert any(expected in p for p in problems), problems


def test_the_proxies_are_load_balanced_on_their_health(compose):
    cfg = (dc.COMPOSE_DIR / "haproxy.cfg").read_text()
    port = dc.option_value(dc.args_of(compose["services"]["proxy"]["command"]), "--port")
    assert f"proxy:{port} check" in cfg and "option httpchk GET /health" in cfg
    assert compose["services"]["proxy"]["deploy"]["replicas"] >= 2
    assert "http-buffer-request" not in cfg  # model calls and streams pass through unbuffered


def test_vllm_is_a_gpu_profile_speaking_the_proxys_dialect(compose):
    vllm = compose["services"]["vllm"]
    assert vllm["profiles"] == ["vllm"]
    (device,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]
    flags = " ".join(vllm["command"])
    for flag in ("--enable-auto-tool-choice", "--tool-call-parser=", "--served-model-name="):
        assert flag in flags
    assert vllm["environment"]["HF_HUB_OFFLINE"] == "1"  # weights from a local folder only


@pytest.mark.skipif(shutil.which("podman") is None, reason="podman-compose needs podman on PATH")
def test_podman_compose_accepts_the_file(tmp_path):
    folder = tmp_path / "compose"
    shutil.copytree(dc.COMPOSE_DIR, folder, ignore=shutil.ignore_patterns("secrets", ".env"))
    (folder / "secrets").mkdir()
    for name in ("polar.env", "redis.env"):
        (folder / "secrets" / name).write_text("")
    exe = Path(sys.executable).parent / "podman-compose"  # installed with the dev extras
    argv = [str(exe) if exe.exists() else "podman-compose", "-f", str(folder / "compose.yaml")]
    ok = subprocess.run([*argv, "config"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "worker-run" in ok.stdout
    (folder / "compose.yaml").write_text(COMPOSE.read_text().replace("services:\n", "services:\n  - oops\n", 1))
    bad = subprocess.run([*argv, "config"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0


# --- Kubernetes ----------------------------------------------------------------------------------

def test_every_manifest_matches_its_schema(k8s):
    assert {d["kind"] for _, d in k8s} >= {"Namespace", "Secret", "ConfigMap", "StatefulSet", "Deployment", "Service",
                                           "PodDisruptionBudget", "ScaledObject", "TriggerAuthentication"}
    problems = [p for name, doc in k8s for p in dc.k8s_schema_errors(doc)]
    assert problems == []


@pytest.mark.parametrize("kind, name, breakage, expected", [
    ("Deployment", "polar-api", lambda d: d["spec"]["template"]["spec"]["containers"][0].update(readinesProbe={}),
     "'readinesProbe' was unexpected"),
    ("StatefulSet", "polar-redis", lambda d: d["spec"].update(replicas="one"), "spec/replicas"),
    ("ScaledObject", "polar-worker-run", lambda d: d["spec"]["triggers"][0]["metadata"].update(listname="run"),
     "'listname' was unexpected"),
    ("ScaledObject", "polar-worker-run", lambda d: d["spec"]["triggers"][0]["metadata"].update(listLength="eight"),
     "'eight' does not match"),
    ("ScaledObject", "polar-worker-run", lambda d: d["spec"]["advanced"]["horizontalPodAutoscalerConfig"]
     ["behavior"]["scaleDown"].update(stabilisationWindowSeconds=60), "'stabilisationWindowSeconds' was unexpected"),
    ("TriggerAuthentication", "polar-redis", lambda d: d["spec"]["secretTargetRef"][0].update(parameter="pasword"),
     "'pasword' is not one of"),
])
def test_schema_checks_fail_on_a_broken_copy(k8s, kind, name, breakage, expected):
    broken = copy.deepcopy(_doc(k8s, kind, name))
    breakage(broken)
    problems = dc.k8s_schema_errors(broken)
    assert any(expected in p for p in problems), problems


def test_manifests_agree_with_the_code(k8s):
    assert dc.k8s_problems(k8s) == []
    redis_conf = _doc(k8s, "ConfigMap", "polar-redis-config")["data"]["redis.conf"]
    assert dc.redis_conf_problems("ConfigMap/polar-redis-config", redis_conf) == []


def _trigger_lists(so: dict) -> list[str]:
    return [t["metadata"]["listName"] for t in so["spec"]["triggers"]]


def test_init_scales_on_every_priority_list_of_its_queue(k8s):
    from kombu.transport.redis import Channel

    from pipeline.messages import PRIORITY_SEP, PRIORITY_STEPS, init_priority

    lists = _trigger_lists(_doc(k8s, "ScaledObject", "polar-worker-init"))
    # dispatch_priority 0..100 -> message priority 9..0 -> the kombu step whose list holds it
    # (kombu's own rounding); every such list is watched.
    kombu_channel = SimpleNamespace(priority_steps=list(PRIORITY_STEPS))
    steps = {Channel.priority(kombu_channel, init_priority(p)) for p in range(0, 101)}
    assert set(lists) == {"init" if s == 0 else f"init{PRIORITY_SEP}{s}" for s in steps}


def _set_stage_trigger(stage: str, listname: str):
    def breakage(docs):
        so = _doc(docs, "ScaledObject", f"polar-worker-{stage}")
        so["spec"]["triggers"][0]["metadata"]["listName"] = listname
    return breakage


def _drop(kind: str, name: str):
    def breakage(docs):
        docs[:] = [(f, d) for f, d in docs if not (d["kind"] == kind and d["metadata"]["name"] == name)]
    return breakage


def _edit(kind: str, name: str, fn):
    def breakage(docs):
        fn(_doc(docs, kind, name))
    return breakage


def _container(d: dict) -> dict:
    return d["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("breakage, expected", [
    (_set_stage_trigger("run", "celery"), "listName [\"'celery'\"], the run queue's messages wait in"),
    (_set_stage_trigger("postrun", "polar:postrun"), "the postrun queue's messages wait in"),
    (_edit("ScaledObject", "polar-worker-init", lambda d: d["spec"]["triggers"].pop()), "the init queue's messages"),
    (_drop("ScaledObject", "polar-worker-evaluate"), "no ScaledObject scales polar-worker-evaluate"),
    (_drop("Deployment", "polar-worker-callback"), "no Deployment runs `polar worker --stage callback`"),
    (_edit("ScaledObject", "polar-worker-run", lambda d: d["spec"].update(minReplicaCount=0)),
     "minReplicaCount below 1"),
    (_edit("Deployment", "polar-worker-run", lambda d: _container(d).update(args=["worker", "--stage", "run",
                                                                                 "--soft-shutdown", "60"])),
     "No such option '--soft-shutdown'"),
    (_edit("Deployment", "polar-worker-run", lambda d: d["spec"]["template"]["spec"].update(
        terminationGracePeriodSeconds=30)), "< terminationGracePeriodSeconds (30)"),
    (_edit("Deployment", "polar-proxy", lambda d: _container(d).update(args=["proxy", "--listen", "0.0.0.0"])),
     "No such option '--listen'"),
    (_edit("Deployment", "polar-api", lambda d: _container(d).pop("readinessProbe")), "no HTTP readiness probe"),
    (_edit("ConfigMap", "polar-settings", lambda d: d["data"].update(POLAR_VISIBILITY_TIMEOUT=60)),
     "not settings: POLAR_VISIBILITY_TIMEOUT"),
    (_edit("ConfigMap", "polar-settings", lambda d: d["data"].update(POLAR_API_TOKEN="x")), "holds secrets"),
    (_edit("TriggerAuthentication", "polar-redis", lambda d: d["spec"]["secretTargetRef"][0].update(
        key="REDIS_PASS")), "no key REDIS_PASS in Secret polar-secrets"),
    (_edit("Deployment", "polar-flower", lambda d: _container(d)["envFrom"][1]["secretRef"].update(name="flower")),
     "secretRef flower does not exist"),
])
def test_manifest_cross_checks_fail_on_a_broken_copy(k8s, breakage, expected):
    broken = copy.deepcopy(k8s)
    breakage(broken)
    problems = dc.k8s_problems(broken)
    assert any(expected in p for p in problems), problems


def test_kustomization_lists_existing_files_and_generates_the_secret():
    (kustomization,) = dc.load_yaml_docs(dc.K8S_DIR / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (dc.K8S_DIR / resource).is_file(), resource
    assert "secret.example.yaml" not in kustomization["resources"]  # a template, never applied as is
    (generated,) = kustomization["secretGenerator"]
    assert generated["name"] == "polar-secrets" and kustomization["generatorOptions"]["disableNameSuffixHash"]


# --- every recipe --------------------------------------------------------------------------------

@pytest.mark.parametrize("path", RECIPE_TEXTS, ids=lambda p: p.name)
def test_every_polar_name_in_a_recipe_is_a_setting(path):
    assert dc.unknown_polar_names(path.read_text()) == set()


def test_the_settings_name_check_can_fail():
    assert dc.unknown_polar_names("POLAR_READY_CAPACITY: 4\nPOLAR_READY_CAPACTY: 4") == {"POLAR_READY_CAPACTY"}


@pytest.mark.parametrize("path", RECIPE_TEXTS, ids=lambda p: p.name)
def test_no_recipe_holds_a_secret_value(path):
    assert dc.plaintext_secret_problems(path.name, path.read_text()) == []


@pytest.mark.parametrize("text", ["POLAR_API_TOKEN=abc123", "  POLAR_ADMIN_TOKEN: \"s3cret\"",
                                  "POLAR_REDIS_URL=redis://:hunter2@redis:6379/0", "REDIS_PASSWORD: pw"])
def test_the_secret_check_can_fail(text):
    assert dc.plaintext_secret_problems("x", text) != []


def test_the_image_runs_polar_as_a_non_root_user():
    text = dc.CONTAINERFILE.read_text()
    assert 'ENTRYPOINT ["polar"]' in text
    assert "\nUSER polar\n" in text and "ARG BASE_IMAGE=" in text and "ARG EXTRAS=" in text
