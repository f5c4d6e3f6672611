#!/usr/bin/env bash
# The main job on a fresh machine: install leasewise, describe four simulated hosts in a fresh SQLite
# store, ask for leases the way users do (a best-effort job, an advance reservation that needs its
# hosts, an immediate lease), look at the plan, then let the daemon enact it on the simulated driver with
# a fast-forwarded clock, list what happened and compare it with the plan. Nothing real is touched.
#
#   bash examples/demo.sh            (LEASEWISE_DEMO_STATE=path keeps the store somewhere else)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! out=$(python3 -m pip install -q --disable-pip-version-check -e . 2>&1); then
    printf '%s\n' "$out" | tail -40 >&2
    echo "demo: pip install failed (its last lines above)" >&2
    exit 1
fi

state=${LEASEWISE_DEMO_STATE:-$(mktemp -d)/leasewise-demo.sqlite}
lw() { leasewise "$@" --state "$state"; }
echo "store: $state"

for i in 1 2 3 4; do
    lw host add "sim$i" --uri "sim://sim$i" --cpus 2 --memory 4096
done
lw host list

start=$(python3 -c 'from datetime import datetime, timedelta, timezone; print((datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=30)).isoformat())')
lw lease submit --nodes 4 --cpus 2 --memory 2048 --duration 2h --name batch-job          # best-effort
lw lease submit --nodes 4 --cpus 2 --memory 4096 --duration 1h --start "$start" --no-preemptible --name class-lab  # AR
lw lease submit --nodes 1 --cpus 1 --memory 1024 --duration 20m --start now --name quick-check || true            # immediate (rejected: no room now)
lw plan
lw run --fast --until-idle
lw lease list
lw report                                                                  # planned vs enacted, per reservation
