#!/usr/bin/env bash
# Generate the compose stack's secrets (once): secrets/polar.env and secrets/redis.env, mode
# 0600, random values from the kernel. Existing files are kept (--force replaces them).
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p secrets
chmod 700 secrets
if [ -e secrets/polar.env ] && [ "${1:-}" != "--force" ]; then
  echo "secrets/polar.env exists (--force replaces it)"
  exit 0
fi
rand() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
umask 077
redis_password=$(rand)
cat > secrets/redis.env <<END
REDIS_PASSWORD=$redis_password
END
cat > secrets/polar.env <<END
POLAR_REDIS_URL=redis://:$redis_password@redis:6379/0
POLAR_API_TOKEN=$(rand)
POLAR_ADMIN_TOKEN=$(rand)
POLAR_FLOWER_BASIC_AUTH=polar:$(rand)
POLAR_CALLBACK_SECRET=$(rand)
END
echo "wrote $(pwd)/secrets/polar.env and secrets/redis.env (0600)"
