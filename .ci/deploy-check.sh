#!/usr/bin/env bash
# Validates deploy/ with real parsers, since EMQX and Kubernetes cannot run on CI machines:
#   - the systemd unit: `systemd-analyze verify` (any complaint fails: it exits 0 on unknown
#     keys and bad values, so its output is checked) and `systemd-analyze security --offline`;
#   - the compose file: docker-compose's own loader (`config`), which checks it against the
#     Compose schema and resolves its variables (from deploy/compose/env.example);
#   - the Kubernetes manifests: kubernetes-validate (PyPI) with --strict, against the schemas
#     of the Kubernetes version it ships;
#   - EMQX's settings in both (HOCON in EMQX_* variables): parsed with pyhocon (PyPI) and checked
#     to send authentication and authorization to Gantry (.ci/emqx_hocon_check.py).
# Installs what is missing: systemd and docker-compose from Debian, kubernetes-validate and
# pyhocon from PyPI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

apt_install() {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
command -v docker-compose >/dev/null 2>&1 || apt_install docker-compose
command -v kubernetes-validate >/dev/null 2>&1 || python3 -m pip install -q kubernetes-validate==1.37.0
python3 -c 'import pyhocon, yaml' 2>/dev/null || python3 -m pip install -q pyhocon==0.3.63 pyyaml

echo "--- systemd unit"
# verify wants the ExecStart binary to exist: check a copy that runs /bin/true instead.
sed 's#/usr/local/bin/gantry#/bin/true#' deploy/systemd/gantry.service > "$work/gantry.service"
complaints=$(systemd-analyze verify "$work/gantry.service" 2>&1 || true)
if [ -n "$complaints" ]; then
  echo "$complaints"
  echo "deploy/systemd/gantry.service: systemd-analyze verify complained"
  exit 1
fi
# The exposure score (0 safest, 10 least): the hardening options must keep it low.
systemd-analyze security --offline=yes --threshold=20 "$work/gantry.service" | tail -n 1

echo "--- compose file"
docker-compose --env-file deploy/compose/env.example -f deploy/compose/compose.yaml config -q
docker-compose --env-file deploy/compose/env.example -f deploy/compose/compose.yaml config --services

echo "--- Kubernetes manifests"
kubernetes-validate --strict --quiet deploy/kubernetes/*/*.yaml

echo "--- EMQX settings"
docker-compose --env-file deploy/compose/env.example -f deploy/compose/compose.yaml config > "$work/compose.yaml"
python3 .ci/emqx_hocon_check.py "$work/compose.yaml" deploy/kubernetes/scale-out/gantry.yaml
echo "deploy/: valid"
