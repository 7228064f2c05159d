#!/usr/bin/env bash
# `systemd-analyze verify` on the systemd unit of docs/daemon.md (the ```ini block after "As a systemd service"),
# with ExecStart pointed at $1's ratchet (the unit's /srv/ratchet path does not exist here). Skipped, saying so,
# where systemd-analyze is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(realpath "${1:-.venv-ci}")
if ! command -v systemd-analyze >/dev/null; then
  echo "systemd_check: systemd-analyze not installed; unit not verified"
  exit 0
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 - "$out/ratchet.service" "$venv/bin/ratchet" <<'PY'
import re, sys
text = open("docs/daemon.md").read()
unit = re.search(r"As a systemd service.*?```ini\n(.*?)```", text, re.S).group(1)
open(sys.argv[1], "w").write(unit.replace("/srv/ratchet/.venv/bin/ratchet", sys.argv[2]))
PY
for key in UMask=0077 NoNewPrivileges=yes ProtectSystem=strict ReadWritePaths= PrivateTmp=yes MemoryMax= TasksMax= \
  IPAddressDeny=any IPAddressAllow=localhost RestrictAddressFamilies=; do
  grep -q "^$key" "$out/ratchet.service" || { echo "systemd_check: the unit lacks $key" >&2; exit 1; }
done
# verify reports unknown keys, bad values and a missing ExecStart binary; the User= may not exist on this machine.
log=$(systemd-analyze verify "$out/ratchet.service" 2>&1 || true)
bad=$(printf '%s\n' "$log" | grep -v -e "^$" -e "User=ratchet" -e "Failed to resolve user" -e "ratchet.service: Unit configuration has fatal error" || true)
if [ -n "$bad" ] || printf '%s' "$log" | grep -qi "unknown key\|failed to parse\|not executable"; then
  printf 'systemd_check: systemd-analyze verify:\n%s\n' "$log" >&2
  exit 1
fi
echo "systemd_check: docs/daemon.md's unit passes systemd-analyze verify"
