#!/usr/bin/env bash
# One device call of the GPU session on a bare machine with CUDA torch and no package index:
# installs the wheels carried in .whl (gymnasium, tyro, rsl_rl and their pure deps), puts
# distrl's checkout (and .envpool, EnvPool for Atari, when carried) on the path with
# `distrl`/`train`/`play` shims, then runs gpu_session.sh's parts, each under its own time
# limit so one failure leaves time for the rest. peers/gpu_carry.sh builds .whl and .envpool.
#
#   bash peers/gpu_call.sh OUT_DIR part:seconds ...
set -uo pipefail
out=${1:?usage: gpu_call.sh OUT_DIR part:seconds ...}
shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
[ -d .envpool ] && PYTHONPATH=$PYTHONPATH:$PWD/.envpool
mkdir -p /tmp/bin "$out"
for c in distrl train play; do
    fn=main
    [ "$c" != distrl ] && fn=${c}_main
    printf '#!/bin/sh\nexec python3 -c "import sys; from distrl.cli import %s; sys.exit(%s())" "$@"\n' \
        "$fn" "$fn" >/tmp/bin/$c
    chmod +x /tmp/bin/$c
done
export PATH=/tmp/bin:$PATH
start=$SECONDS
for spec in "$@"; do
    part=${spec%%:*} limit=${spec##*:}
    echo "=== $part (limit ${limit}s, at ${SECONDS}s)"
    timeout -k 5 "$limit" bash peers/gpu_session.sh "$out" "$part" || echo "=== $part ended $?"
done
echo "=== done in $((SECONDS - start))s"
# what comes back (a device call returns at most 8 files): the logs and tables, one archive
[ -n "${OUT:-}" ] && tar czf "$OUT/gpu.tgz" --exclude=checkpoints --exclude='*.pt' -C "$out" .
