#!/usr/bin/env bash
# Bring the compose stack up for real on this host and run the demo task through it: images
# built FROM the local debootstrap image (no registry), Redis and HAProxy from Debian's packages,
# two proxies behind HAProxy, one worker per stage, the reference model; then tear it all down.
# Run by tests/e2e/test_compose_stack.py (with an image tagged by the source tree). Needs podman,
# podman-compose (dev extras) and, with podman's CNI network backend, the dnsname plugin
# (infra/images/install_host_runtimes.sh).
#
#   infra/compose/smoke.sh [--build]     # --build: rebuild the images even if they exist
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
compose_bin=${COMPOSE_BIN:-$(command -v podman-compose || echo "$root/.venv/bin/podman-compose")}
export STACK_IMAGE=${STACK_IMAGE:-localhost/polar:latest}
export REDIS_IMAGE=${REDIS_IMAGE:-localhost/polar-deps:bookworm}
export LB_IMAGE=${LB_IMAGE:-localhost/polar-deps:bookworm}
base=${BASE_IMAGE:-localhost/polar-test:bookworm}
t0=$(date +%s)

if [ "${1:-}" = "--build" ] || ! podman image exists "$STACK_IMAGE"; then
  # The host's CA bundle and wheel folder are lent to the build (PyPI behind a TLS-inspecting
  # proxy; torch's CPU wheel where the host keeps one); neither ends up in the image.
  extra=()
  [ -d /opt/wheels ] && extra+=(-v /opt/wheels:/wheels:ro --build-arg PIP_FIND_LINKS=/wheels)
  podman build --pull=never -f "$root/infra/images/polar/Containerfile" --build-arg BASE_IMAGE="$base" \
    --build-arg EXTRAS=model,demo -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
    --build-arg PIP_CERT=/run/host-ca.crt "${extra[@]}" -t "$STACK_IMAGE" "$root"
fi
if [ "${1:-}" = "--build" ] || ! podman image exists "$REDIS_IMAGE"; then
  podman build --pull=never -f "$root/infra/images/polar/Containerfile.deps" --build-arg BASE_IMAGE="$base" \
    -t "$REDIS_IMAGE" "$root"
fi
t_built=$(date +%s)

# A copy of the recipe with its own secrets, project name and free ports: nothing of a real
# deployment beside it is touched.
work=$(mktemp -d)
cp -r "$here"/compose.yaml "$here"/redis.conf "$here"/haproxy.cfg "$here"/make_secrets.sh "$work"/
"$work/make_secrets.sh" >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export API_PORT=$(free_port) PROXY_PORT=$(free_port) FLOWER_PORT=$(free_port)
project=polar-smoke-$$
dc() { "$compose_bin" -p "$project" -f "$work/compose.yaml" "$@"; }
cleanup() {
  dc down -v -t 5 >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

dc up -d >"$work/up.log" 2>&1 || { cat "$work/up.log"; exit 1; }
t_up=$(date +%s)
set -a; . "$work/secrets/polar.env"; set +a
python3 - "$API_PORT" "$PROXY_PORT" "$FLOWER_PORT" <<'PY'
import base64, json, os, sys, time, urllib.error, urllib.request

api, proxy, flower = (f"http://127.0.0.1:{p}" for p in sys.argv[1:4])
token = os.environ["POLAR_API_TOKEN"]

def call(method, url, body=None, headers=None):
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, resp.read()

def wait(url, what, timeout=300, headers=None):
    deadline = time.time() + timeout
    while True:
        try:
            if call("GET", url, headers=headers)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.time() > deadline:
            sys.exit(f"{what} not healthy after {timeout}s ({url})")
        time.sleep(2)

auth = {"Authorization": f"Bearer {token}"}
wait(f"{api}/health", "API")
wait(f"{proxy}/health", "proxy (through HAProxy)")
basic = base64.b64encode(os.environ["POLAR_FLOWER_BASIC_AUTH"].encode()).decode()
wait(f"{flower}/healthcheck", "Flower", headers={"Authorization": f"Basic {basic}"})
try:
    call("GET", f"{api}/rollout/status")
    sys.exit("the API answered without its token")
except urllib.error.HTTPError as exc:
    assert exc.code == 401, exc.code
task = {"instruction": "Create a file named hello.txt in the working directory containing the line 'hello world'.",
        "num_samples": 4, "timeout_seconds": 180,
        "runtime": {"backend": "local", "prepare": [{"type": "upload_file", "src": "/opt/polar/examples/bash_agent.py",
                                                      "dst": "/polar/session/agent/bash_agent.py"}]},
        "agent": {"custom_shell": {"command": "python \"$POLAR_SESSION_DIR/agent/bash_agent.py\" {{INSTRUCTION}}"},
                  "model_name": "demo-policy"},
        "builder": {"strategy": "per_request"},
        "evaluator": {"strategy": "command", "config": {"command": "test \"$(cat hello.txt)\" = 'hello world'"}}}
started = time.time()
_, body = call("POST", f"{api}/rollout/task/submit", task, auth)
task_id = json.loads(body)["task_id"]
while True:
    _, body = call("GET", f"{api}/rollout/task/{task_id}", headers=auth)
    status = json.loads(body)
    if status.get("state") in ("completed", "cancelled") or status.get("status") in ("completed", "failed"):
        break
    if time.time() - started > 300:
        sys.exit(f"task not done after 300 s: {json.dumps(status)[:2000]}")
    time.sleep(2)
results = status.get("results") or []
done = [r for r in results if r.get("status") == "COMPLETED" and r.get("reward") == 1]
print(f"task {task_id}: {len(done)}/{task['num_samples']} sessions COMPLETED with reward 1 "
      f"in {time.time() - started:.1f} s")
if len(done) != task["num_samples"]:
    sys.exit(json.dumps(status, indent=1)[:4000])
PY
t_done=$(date +%s)
replicas=$(podman ps --filter "label=io.podman.compose.project=$project" --format '{{.Names}}' | grep -c _proxy_)
# HAProxy logs each request with the backend server that served it (proxies/proxyN).
served=$(podman logs "${project}_lb_1" 2>&1 | grep -o 'proxies/proxy[0-9]*' | sort | uniq -c | tr -s ' ' | paste -sd, -)
echo "proxy replicas: $replicas; requests per replica through HAProxy:$served"
[ "$(podman logs "${project}_lb_1" 2>&1 | grep -o 'proxies/proxy[0-9]*' | sort -u | wc -l)" -ge 2 ] || {
  echo "HAProxy did not spread calls over the proxy replicas"; exit 1; }
echo "timing: images $((t_built - t0)) s, up $((t_up - t_built)) s, healthy + demo task $((t_done - t_up)) s"
