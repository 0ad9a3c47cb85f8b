"""`distrl bench <what>`: each benchmark is one command with a results directory (--out),
a CSV, a printed table and a header naming the machine."""

from __future__ import annotations

import sys
from collections.abc import Callable

from benchmarks.apex import ApexArgs, apex
from benchmarks.broadcast import BroadcastArgs, broadcast
from benchmarks.cluster import ClusterArgs, cluster
from benchmarks.comm import CommArgs, comm
from benchmarks.finetune import FinetuneArgs, finetune
from benchmarks.learn import LearnArgs, learn
from benchmarks.meta_world import MetaWorldArgs, metaworld
from benchmarks.neighbour import NeighbourArgs, neighbour
from benchmarks.offpolicy import OffPolicyArgs, offpolicy
from benchmarks.overlap import OverlapArgs, overlap
from benchmarks.pbt import PBTBenchArgs, pbt
from benchmarks.project import ProjectArgs, project_cmd
from benchmarks.roofline import RooflineArgs, roofline
from benchmarks.sb3_api import SB3ApiArgs, sb3_api
from benchmarks.scaling import ScalingArgs, scaling
from benchmarks.selfplay import SelfPlayArgs, selfplay
from benchmarks.sinks import SinksArgs, sinks
from benchmarks.solve import SolveArgs, solve
from benchmarks.startup import StartupArgs, startup
from benchmarks.straggler import StragglerArgs, straggler
from benchmarks.throughput import ThroughputArgs, throughput
from benchmarks.update import UpdateArgs, update
from distrl.args import parse_flags

USAGE = """usage: distrl bench <what> [options]   (`distrl bench <what> --help` for options)

  throughput   env-steps/s: rollout only, and whole iterations (rsl_rl's CartPole setup)
  solve        training wall time to a target return, median over seeds
  startup      where the time from the command to the first iteration goes, by phase
  metaworld    Meta-World env-steps/s per process: distrl's MetaWorldMT10 vs SyncVectorEnv
  finetune     demos -> behaviour cloning -> RLOO fine-tuning on a suite, held-out success
  scaling      FPS, speedup, efficiency and time breakdown over world sizes (torchrun)
  learn        time-to-target and learning curves per world size
  comm         all-reduce time vs message size, fitted latency/bandwidth; flat vs bucketed sync
  overlap      the gradient all-reduce overlapped with backward against one call after it,
               alternating runs: iteration, learn and comm time
  project      t_iter, speedup and efficiency projected to large world sizes
  straggler    allreduce vs parameter server (BSP, ASP, BAP), with and without a slow worker
  broadcast    learner -> actor weight sync: routing table vs naive vs dist.broadcast, GB/s
  neighbour    a task's iteration time alone and beside a second distrl run, per OpenMP setting
  offpolicy    dqn, sac or td3 against Stable-Baselines3's, alternating: wall time, eval return
  sb3-api      one SB3 script run with SB3's PPO and with distrl.PPO, alternating: wall time,
               eval return
  apex         Ape-X (1 learner + A actors) against allreduce on A ranks, equal env steps:
               greedy evaluation against wall time
  pbt          population-based training against the same members left alone, at equal env
               steps: wall time, best final score, the task's defaults
  selfplay     connect-four by self-play: win rates against random and scripted players, Elo
  roofline     one iteration against the machine's matmul limit at its exact GEMM shapes, by phase
  update       one off-policy update (sac, td3, dqn) by part: FLOPs, ms, GFLOP/s, matmul share
  cluster      nodes in network namespaces on rate-limited links (root): all-reduce vs the
               alpha-beta model per link rate and past W=2; routing-table weight sync vs naive
               from several learners to several actors
  sinks        a parameter server's sink nodes against the flat server on the testbed (root):
               bytes between machines per update, iteration time, 2 and 4 machines
"""

COMMANDS: dict[str, tuple[type, Callable]] = {
    "throughput": (ThroughputArgs, throughput),
    "solve": (SolveArgs, solve),
    "startup": (StartupArgs, startup),
    "finetune": (FinetuneArgs, finetune),
    "metaworld": (MetaWorldArgs, metaworld),
    "scaling": (ScalingArgs, scaling),
    "learn": (LearnArgs, learn),
    "comm": (CommArgs, comm),
    "overlap": (OverlapArgs, overlap),
    "project": (ProjectArgs, project_cmd),
    "straggler": (StragglerArgs, straggler),
    "broadcast": (BroadcastArgs, broadcast),
    "neighbour": (NeighbourArgs, neighbour),
    "offpolicy": (OffPolicyArgs, offpolicy),
    "sb3-api": (SB3ApiArgs, sb3_api),
    "pbt": (PBTBenchArgs, pbt),
    "apex": (ApexArgs, apex),
    "selfplay": (SelfPlayArgs, selfplay),
    "sinks": (SinksArgs, sinks),
    "roofline": (RooflineArgs, roofline),
    "update": (UpdateArgs, update),
    "cluster": (ClusterArgs, cluster),
}
"""Benchmark name -> (its arguments, parsed by tyro; the function that runs it)."""


def bench_main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown benchmark {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    args_cls, fn = COMMANDS[name]
    try:
        fn(parse_flags(args_cls, rest, f"distrl bench {name}"))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
