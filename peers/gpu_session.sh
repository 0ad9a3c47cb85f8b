#!/usr/bin/env bash
# The GPU figures of docs/benchmarks.md ("On a GPU"), in one command on a CUDA machine with
# torch installed (distrl and the peers' packages on PYTHONPATH or installed):
#
#   bash peers/gpu_session.sh OUT_DIR [part ...]
#     parts: smoke cuda throughput peer solve tests pixels recurrent minatar atari
#
# Writes OUT_DIR/<part>.log and the benches' CSVs; prints a short table at the end of each part.
set -uo pipefail
out=${1:?usage: gpu_session.sh OUT_DIR [part ...]}
shift
parts=${*:-smoke throughput peer solve}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

smoke() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
    $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
        torch.cuda.get_device_name(0), "nccl", torch.cuda.nccl.version())'
    # the tests that need CUDA (skipped on CPU machines)
    $py -m pytest -q -rs -k cuda tests/envs tests/test_checkpoint.py -p no:cacheprovider
    # one rank, --device auto: the GPU
    time distrl train cartpole --env.num-envs 4096 --run-dir "$out/runs/cartpole4096" \
        --progress False
    tail -n 2 "$out/runs/cartpole4096/metrics.jsonl"
    # NCCL under real torchrun (one GPU here, so a world of one: the group, its collectives and
    # the checkpoint path; more ranks than GPUs fall back to CPU and Gloo, also shown)
    time torchrun --standalone --nproc_per_node 1 --no_python distrl train cartpole \
        --distributed True --run-dir "$out/runs/nccl1" --progress False --agent.max-iterations 30
    time distrl train cartpole --nproc 2 --run-dir "$out/runs/auto2" --progress False \
        --agent.max-iterations 10
}

throughput() {
    for case in rollout e2e; do
        for envs in 1024 4096 16384 65536; do
            $py -m benchmarks.throughput --case $case --num-envs $envs --iterations 20 \
                --device cuda
        done
    done | tee "$out/throughput.jsonl"
}

peer() {
    for envs in ${PEER_ENVS:-1024 4096 16384 65536}; do
        $py peers/rsl_rl_ppo.py --envs $envs --iterations 20 --device cuda
        $py -m benchmarks.throughput --case e2e --num-envs $envs --iterations 20 --device cuda
    done | tee "$out/peer.jsonl"
}

solve() {
    distrl bench solve --tasks cartpole --seeds "${SEEDS:-5}" --out "$out/solve_default"
    distrl bench solve --tasks cartpole --seeds "${SEEDS:-5}" --out "$out/solve_4096" \
        --extra="--env.num-envs 4096 --agent.max-iterations 30"
}

e2e() {  # one task's own config, one fresh process: e2e <task> <envs> [agent overrides JSON]
    local agent=${3:-'{}'}
    $py -m benchmarks.throughput --case e2e --task "$1" --own-config --num-envs "$2" \
        --num-steps "${STEPS:-128}" --iterations "${ITERS:-5}" --device cuda --agent "$agent"
}

pixels() {  # the CNN update: eager, bf16 autocast, compiled, both; then more envs
    for agent in '{}' '{"precision": "bf16"}' '{"compile": true}' \
        '{"compile": true, "precision": "bf16"}'; do
        e2e minatar-breakout 4096 "$agent"
    done | tee "$out/pixels.jsonl"
    e2e minatar-breakout 16384 '{}' | tee -a "$out/pixels.jsonl"
}

recurrent() {  # the LSTM policy of the memory task (32-step sequences)
    for envs in 4096 16384; do STEPS=32 e2e cartpole-novel $envs; done | tee "$out/recurrent.jsonl"
}

minatar() {  # MinAtar Breakout to 10M env steps on one GPU, defaults but the envs
    time distrl train minatar-breakout --env.num-envs "${ENVS:-4096}" \
        --agent.total-timesteps "${STEPS_TOTAL:-10000000}" --run-dir "$out/runs/breakout" \
        --progress False --tensorboard False
    tail -n 1 "$out/runs/breakout/metrics.jsonl"
}

atari() {  # the CleanRL-style peer's speed on this GPU (Pong, 65,536 agent steps), then Atari
    # Pong from 2 ranks on the one GPU to a return of 18 with CleanRL's settings (8 envs per
    # rank, the 10M-step LR schedule): both ranks on cuda:0 talk through Gloo (NCCL refuses two
    # ranks on one device). A run that the part's time limit stopped resumes on the next call.
    $py peers/cleanrl_atari_envpool_ppo.py --game pong --total-timesteps 65536 --seed 0 \
        --device cuda --quiet
    distrl train atari-pong --nproc 2 --device cuda:0 --dist.backend gloo \
        --env.num-envs "${ATARI_ENVS:-8}" --agent.total-timesteps 10000000 \
        --agent.target-return 18 --run-dir "$out/runs/pong" --resume auto --progress False \
        --tensorboard False
    tail -n 1 "$out/runs/pong/metrics.jsonl"
}

cuda() {  # the device, the CUDA tests, the golden run (CPU-pinned) under this torch
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    $py -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
    $py -m pytest -q -rs -x -p no:cacheprovider -k "cuda or gpu" tests/envs tests/policy \
        tests/test_checkpoint.py tests/algorithms
    $py -m pytest -q -x -p no:cacheprovider tests/golden tests/envs/test_minatar_parity.py
}

tests() {  # TESTS: files or node ids (default: the whole suite)
    $py -m pytest -q -rfE -n "${WORKERS:-8}" -p no:cacheprovider --timeout 300 ${TESTS:-}
}

for part in $parts; do
    echo "=== $part"
    $part 2>&1 | tee "$out/$part.log"
done
