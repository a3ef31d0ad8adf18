#!/usr/bin/env bash
# What the container and sandbox runtimes need on a Debian worker host, for `.ci/run` and for
# developers who want the docker/bwrap tests to run instead of being skipped (needs root):
# podman + runc (the Docker-compatible API the tests drive), bubblewrap (the bwrap backend),
# debootstrap (builds the test image without a registry), chromium and a font (the trajectory
# viewer's headless browser test, tests/e2e/test_viewer.py), the dnsname CNI plugin (containers of
# a compose network find each other by name: infra/compose/smoke.sh). podman is set to use runc and
# no default ulimits (crun, and ulimits, fail on the cgroups of these machines). Idempotent.
set -euo pipefail
want=(podman runc bubblewrap debootstrap chromium fonts-dejavu-core golang-github-containernetworking-plugin-dnsname)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
conf=/etc/containers/containers.conf
if ! grep -q '^runtime = "runc"' "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  [ -f "$conf" ] && cp "$conf" "$conf.polar-backup"
  printf '[engine]\nruntime = "runc"\n\n[containers]\ndefault_ulimits = []\n' > "$conf"
fi
echo "host runtimes ready: $(podman --version), $(bwrap --version), $(chromium --version 2>/dev/null)"
