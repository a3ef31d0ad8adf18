#!/usr/bin/env bash
# One podman image per SWE-style fixture task (infra/images/swe/tasks/<instance_id>/), FROM the
# registry-free test image: the task's repository at its base commit in /testbed, pytest, and a
# conda shim for SWE-bench's eval scripts (infra/images/README.md). No registry is used: the base
# image is local (--pull=never) and only pytest comes from PyPI, at build time.
#
#   infra/images/build_swe_images.sh [--force]
#
# Idempotent: an image is rebuilt only when its task folder or the base image changed (a digest
# of both is a label on the image), or with --force. Builds the test image first when it is missing.
set -euo pipefail
cd "$(dirname "$0")"
BASE=localhost/polar-test:bookworm
force=""
[ "${1:-}" = "--force" ] && force=1
podman image exists "$BASE" || ./build_test_image.sh
base_id=$(podman image inspect --format '{{.Id}}' "$BASE")
# PyPI may be reached through a proxy whose CA only the host trusts (as in build_test_image.sh).
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
ca_mount=()
[ -f "$ca" ] && ca_mount=(--volume "$(readlink -f "$ca"):/run/polar-host-ca.crt:ro")
index=()
[ -n "${PIP_INDEX_URL:-}" ] && index=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")

for task in swe/tasks/*/; do
  task=${task%/}
  image=$(sed -n 's/^image: //p' "$task/task.yaml")
  [ -n "$image" ] || { echo "$task/task.yaml names no image (run infra/images/swe/make_tasks.py)" >&2; exit 1; }
  digest=$( { echo "$base_id"; cd "$task" && find . -type f ! -path '*/__pycache__/*' ! -path '*/.pytest_cache/*' \
              -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
  have=$(podman image inspect --format '{{index .Labels "polar.swe.digest"}}' "$image" 2>/dev/null || true)
  if [ -z "$force" ] && [ "$have" = "$digest" ]; then
    echo "$image is up to date"
    continue
  fi
  old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
  podman build --quiet --pull=never --network=host --label "polar.swe.digest=$digest" \
    "${ca_mount[@]}" "${index[@]}" --tag "$image" --file "$task/Dockerfile" "$task" >/dev/null
  # The image this one replaces is ours: drop it unless a container still uses it.
  [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$image")" ] && \
    podman rmi "$old" >/dev/null 2>&1 || true
  echo "built $image"
done
