#!/usr/bin/env bash
# The test image, built without any registry: debootstrap a Debian rootfs (python3, git, patch,
# and the example agent's openai SDK from PyPI), then `podman import` it. Idempotent: nothing
# happens when the image exists (--force rebuilds). Needs root, debootstrap and podman.
#
#   infra/images/build_test_image.sh [--force]
#
# Real task images (SWE-bench, SWE-Gym) come from a registry or a `podman load` of a saved
# archive instead; see infra/images/README.md.
set -euo pipefail
IMAGE=${POLAR_TEST_IMAGE:-localhost/polar-test:bookworm}
MIRROR=${POLAR_TEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "${1:-}" != "--force" ] && podman image exists "$IMAGE"; then
  echo "$IMAGE exists"
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-pip,python-is-python3,git,patch,ca-certificates,procps \
  bookworm "$root" "$MIRROR"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The host's CA bundle: PyPI may be reached through a proxy whose CA only the host trusts.
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/tmp/host-ca.crt"
chroot "$root" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root PIP_CERT=/tmp/host-ca.crt \
  SSL_CERT_FILE=/tmp/host-ca.crt ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} \
  ${https_proxy:+https_proxy=$https_proxy} ${HTTPS_PROXY:+HTTPS_PROXY=$HTTPS_PROXY} \
  pip install --quiet --break-system-packages --no-cache-dir "openai>=1.40"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root/etc/resolv.conf" "$root/tmp/host-ca.crt"
tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$IMAGE"
echo "built $IMAGE"
