"""Functions run inside spawned ranks (importable by module name for the spawn start method)."""

from __future__ import annotations

import dataclasses

import torch

from distrl.config import AgentConfig, EnvConfig, PolicyConfig, TrainConfig


def small_config(
    num_envs: int, distributed: bool, policy: PolicyConfig | None = None, **agent
) -> TrainConfig:
    a = dict(
        num_steps=8,
        num_epochs=3,
        num_minibatches=4,
        learning_rate=3e-3,
        lr_schedule="adaptive",
        desired_kl=0.002,
        max_iterations=4,
        save_interval=1000,
    )
    a.update(agent)
    return TrainConfig(
        task="cartpole",
        env=EnvConfig(num_envs=num_envs),
        agent=AgentConfig(**a),
        policy=policy or PolicyConfig(),
        distributed=distributed,
        tensorboard=False,
        progress=False,
        threads=1,
        # the ranks' equivalences are compared bitwise on CPU and Gloo: --device auto would put
        # one rank on a GPU but two ranks on one GPU's machine on CPU (a GPU has its own
        # kernels and random streams, so its numbers are not the CPU's)
        device="cpu",
    )


def recorded(
    iteration: int, T: int, N: int, obs_dim: int, tasks: int = 0
) -> dict[str, torch.Tensor]:
    """Deterministic fake transitions for all N envs of the global layout (seeded by iteration).
    ``tasks`` K > 0: the last K observation entries are a one-hot task id (env n: task n mod K)
    and task k's rewards are scaled by 10^k (a multi-task batch for PopArt)."""
    g = torch.Generator().manual_seed(1000 + iteration)
    obs = torch.randn(T, N, obs_dim, generator=g) * 2.0 + 0.5
    d = {
        "obs": obs,
        "next_obs": torch.randn(N, obs_dim, generator=g),
        "actions": torch.randint(0, 2, (T, N), generator=g),
        "rewards": torch.rand(T, N, generator=g),
        "terminated": torch.rand(T, N, generator=g) < 0.05,
        "truncated": torch.rand(T, N, generator=g) < 0.05,
        "final_obs": torch.randn(T, N, obs_dim, generator=g),
    }
    if tasks:
        task = torch.arange(N) % tasks
        onehot = torch.nn.functional.one_hot(task, tasks).float()
        for key in ("obs", "next_obs", "final_obs"):
            d[key][..., -tasks:] = onehot
        d["rewards"] *= 10.0 ** task.float()
    return d


class TaskTagged:
    """A VecEnv with a one-hot task id after every observation (row i: task i mod K) and task
    k's rewards scaled by 10^k: a multi-task batch for PopArt, from any single-task env."""

    def __init__(self, env, tasks: int):
        self.env, self.tasks = env, tasks
        self.num_envs, self.device = env.num_envs, env.device
        self.action_space, self.max_episode_steps = env.action_space, env.max_episode_steps
        self.obs_dim = env.obs_dim + tasks
        task = torch.arange(env.num_envs, device=env.device) % tasks
        self.onehot = torch.nn.functional.one_hot(task, tasks).float()
        self.scale = 10.0 ** task.float()

    def _tag(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.cat([obs, self.onehot], -1)

    def reset(self, seed=None):
        return self._tag(self.env.reset(seed))

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        info = dict(info, final_obs=self._tag(info["final_obs"]))
        return self._tag(obs), reward * self.scale, terminated, truncated, info

    def state_dict(self):
        return self.env.state_dict()

    def load_state_dict(self, state):
        self.env.load_state_dict(state)

    def close(self):
        self.env.close()


def equivalence(
    rank: int,
    world: int,
    total_envs: int,
    iterations: int,
    agent: dict,
    strategy_name: str = "allreduce",
) -> dict:
    """Train on recorded transitions; ranks hold contiguous slices of the global envs.

    world == 1 stands for the single process holding every env (minibatches formed with
    blocks = 2 so they equal the union of the two ranks' minibatches). Under a parameter-server
    strategy rank 0 serves and ranks 1.. hold the slices.
    """
    import functools

    from distrl.config import DistConfig
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import make_env
    from distrl.runner.on_policy import OnPolicyRunner
    from distrl.storage.rollout import minibatch_indices, sequence_minibatches

    ranks_in_layout = 2
    ps = strategy_name != "allreduce"
    slot, holders = (rank - 1, world - 1) if ps else (rank, world)
    n_local = total_envs // holders
    cfg = small_config(n_local, distributed=world > 1, **agent)
    cfg = dataclasses.replace(cfg, dist=DistConfig(strategy=strategy_name))
    ctx = context.init(cfg)
    try:
        env = make_env(cfg, ctx.device)
        strategy = make_strategy(cfg, ctx)
        runner = OnPolicyRunner(cfg, strategy, env)
        learner = runner.learner
        if strategy.role.server:
            runner.learn()  # serves until every worker is done
            return runner_replica(runner)
        if world == 1:  # one process forms the global minibatches of two ranks (blocks=2)
            a = cfg.agent
            learner.shuffle = functools.partial(
                sequence_minibatches if runner.policy.recurrent else minibatch_indices,
                a.num_steps,
                n_local,
                a.num_minibatches,
                learner.shuffle_gen,
                ranks_in_layout,
            )
        local_kls: list[float] = []
        n_grad = runner.ppo.num_grad
        inner = strategy.step

        def spy(learner, flat: torch.Tensor):  # record each rank's own KL before agreement
            local_kls.append(float(flat[n_grad]))
            return inner(learner, flat)

        strategy.step = spy
        T = cfg.agent.num_steps
        sl = slice(slot * n_local, (slot + 1) * n_local)
        updates = []
        for it in range(iterations):
            strategy.heartbeat(it)
            d = recorded(it, T, total_envs, env.obs_dim, cfg.policy.popart_tasks)
            buf = runner.buffer
            with torch.no_grad():
                buf.obs.copy_(d["obs"][:, sl])
                buf.actions.copy_(d["actions"][:, sl])
                memory = None
                if runner.policy.recurrent:  # recorded memories, episode starts from the dones
                    g = torch.Generator().manual_seed(1000 + it)
                    mem = torch.randn(total_envs, *buf.memory.shape[1:], generator=g)
                    done = d["terminated"] | d["truncated"]
                    starts = torch.cat([torch.ones_like(done[:1]), done[:-1]])
                    buf.memory.copy_(mem[sl])
                    buf.starts.copy_(starts[:, sl])
                    runner.collector.memory = (0.5 * mem[sl]).clone()
                    memory = buf.memory
                logp, _, values = runner.policy.evaluate(
                    buf.obs.reshape(-1, env.obs_dim),
                    buf.actions.reshape(-1),
                    memory,
                    buf.starts.reshape(-1),
                )
                buf.logprobs.copy_(logp.view(T, n_local))
                buf.values.copy_(values.view(T, n_local))
                scale = runner.policy.reward_norm
                if scale is None:
                    buf.rewards.copy_(d["rewards"][:, sl])
                else:  # what the collector does: scaled rewards, G per step for the moments
                    buf.rewards.copy_(scale(d["rewards"][:, sl].clone()))
                    G = discounted_returns(d, cfg.agent.gamma)
                    runner.collector.disc_returns.copy_(G[:, sl])
                buf.terminated.copy_(d["terminated"][:, sl])
                buf.truncated.copy_(d["truncated"][:, sl])
                final_memory = None if memory is None else memory.repeat(T, 1, 1)
                buf.final_values.copy_(
                    runner.policy.value(
                        d["final_obs"][:, sl].reshape(-1, env.obs_dim), final_memory
                    ).view(T, n_local)
                )
                runner.collector.obs = d["next_obs"][sl].clone()
            m = runner.learn_step()
            updates.append({k: m[k] for k in ("train/updates", "train/early_stop", "lr")})
        strategy.finish()
        return {**runner_replica(runner), "updates": updates, "local_kls": local_kls}
    finally:
        context.shutdown()


def discounted_returns(d: dict[str, torch.Tensor], gamma: float) -> torch.Tensor:
    """G_t = gamma G_{t-1} + r_t per env of recorded transitions, restarting after a done."""
    G, out = torch.zeros_like(d["rewards"][0]), torch.zeros_like(d["rewards"])
    for t in range(d["rewards"].shape[0]):
        G = gamma * G + d["rewards"][t]
        out[t] = G
        G = G.masked_fill(d["terminated"][t] | d["truncated"][t], 0.0)
    return out


def runner_replica(runner) -> dict:
    """Parameters, normalizer statistics (observations, and returns when rewards are scaled)
    and learning rate of a runner's policy."""
    norms = [runner.policy.normalizer, runner.policy.reward_norm]
    stats = [torch.cat([n.mean64, n.m2, n.count.view(1)]) for n in norms if n]
    if runner.policy.popart is not None:
        stats.append(torch.cat([runner.policy.popart.m1, runner.policy.popart.m2]))
    return {
        "params": torch.cat([p.detach().reshape(-1) for p in runner.policy.parameters()]),
        "norm": torch.cat(stats),
        "lr": runner.ppo.lr,
    }


def train_run(rank: int, world: int, overrides: dict) -> dict:
    """The real training entry point inside a rank (used by failure and agreement tests)."""
    from distrl.session import run_training

    cfg = small_config(overrides.pop("num_envs", 32), distributed=world > 1)
    sub = {k: v for k, v in overrides.items() if k in ("agent", "dist", "env")}
    top = {k: v for k, v in overrides.items() if k not in sub}
    for k, v in sub.items():
        cfg = dataclasses.replace(cfg, **{k: dataclasses.replace(getattr(cfg, k), **v)})
    cfg = dataclasses.replace(cfg, **top)
    final = run_training(cfg)
    return {"iteration": final.get("iteration")}


def stop_run(
    rank: int,
    world: int,
    run_dir: str,
    agent: dict,
    dist: dict | None = None,
    ask: tuple[int, int] | None = None,
    resume: str | None = None,
) -> dict:
    """``run_training`` of cartpole, 32 envs over the collecting ranks, that may stop early:
    ``agent`` may set ``target_return``; ``ask=(rank, iteration)``: that rank's hook returns
    False from ``after_iteration`` of that iteration. Returns this rank's final numbers."""
    from distrl import Hooks
    from distrl.config import DistConfig
    from distrl.session import run_training

    class Ask(Hooks):
        def after_iteration(self, runner, record) -> bool:
            return ask is None or (rank, runner.iteration) != ask

    d = DistConfig(**(dist or {}), timeout=30.0)
    by_strategy = {"allreduce": world, "learner-actor": world - d.learners}
    collectors = by_strategy.get(d.strategy, world - 1)  # (a parameter server's workers)
    cfg = small_config(32 // collectors, distributed=world > 1, **agent)
    cfg = dataclasses.replace(cfg, run_dir=run_dir, dist=d, resume=resume)
    final = run_training(cfg, hooks=[Ask()])
    return {k: final.get(k) for k in ("iteration", "stopped", "interrupted")}


def replica(policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """What must be identical on every rank: parameters, buffers and optimizer state, flat."""
    opt = [
        v.detach().reshape(-1).double()
        for s in optimizer.state.values()
        for v in s.values()
        if torch.is_tensor(v)
    ]
    return {
        "params": torch.cat([p.detach().reshape(-1) for p in policy.parameters()]),
        "buffers": torch.cat([b.detach().reshape(-1).double() for b in policy.buffers()]),
        "optimizer": torch.cat(opt) if opt else torch.zeros(0),
    }


def learn_params(
    rank: int, world: int, iterations: int, dist: dict | None = None, policy: dict | None = None
) -> dict:
    """OnPolicyRunner.learn() for a few real iterations; every rank returns its full state.
    ``dist``: DistConfig fields (e.g. another strategy); ``policy``: PolicyConfig fields."""
    from distrl.config import DistConfig, PolicyConfig
    from distrl.distributed import context
    from distrl.distributed.strategies import make_strategy
    from distrl.envs.registry import make_env
    from distrl.runner.on_policy import OnPolicyRunner

    cfg = small_config(
        16, distributed=world > 1, max_iterations=iterations, policy=PolicyConfig(**(policy or {}))
    )
    cfg = dataclasses.replace(cfg, dist=DistConfig(**(dist or {})))
    ctx = context.init(cfg)
    try:
        env = make_env(cfg, ctx.device)
        if cfg.policy.popart_tasks:
            env = TaskTagged(env, cfg.policy.popart_tasks)
        runner = OnPolicyRunner(cfg, make_strategy(cfg, ctx), env)
        final = runner.learn()  # ends with strategy.verify_replicas
        return {
            "iteration": runner.iteration,
            "env_steps": final.get("env_steps"),
            "records": final,
            **replica(runner.policy, runner.ppo.optimizer),
            "lr": runner.ppo.lr,
            "obs": runner.rollouts.obs.clone(),  # rank-local: different seeds, different envs
        }
    finally:
        context.shutdown()


def train_with_fault(
    rank: int,
    world: int,
    fault: str,
    at_iteration: int,
    run_dir: str,
    timeout: float,
    report: str,
) -> dict:
    """run_training where rank 1 dies (``fault="kill"``: SIGKILL) or stalls (``"stop"``:
    SIGSTOP) on entering iteration ``at_iteration``'s update. Rank 0 writes ``report`` (JSON):
    what it raised and how long after entering that update, then re-raises."""
    import json
    import os
    import signal
    import time

    from distrl import Hooks
    from distrl.config import DistConfig
    from distrl.session import run_training

    entered: dict[int, float] = {}

    class Fault(Hooks):
        def before_update(self, runner) -> None:
            entered[runner.iteration] = time.monotonic()
            if runner.strategy.rank == 1 and runner.iteration == at_iteration:
                os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)

    cfg = small_config(16, distributed=True, max_iterations=1000)
    cfg = dataclasses.replace(cfg, run_dir=run_dir, dist=DistConfig(timeout=timeout))
    try:
        final = run_training(cfg, hooks=[Fault()])
    except BaseException as e:
        if rank == 0:
            t = entered.get(at_iteration)
            with open(report, "w") as f:
                json.dump(
                    {
                        "type": type(e).__name__,
                        "error": str(e),
                        "seconds_after_fault": None if t is None else time.monotonic() - t,
                        "iterations_entered": sorted(entered),
                    },
                    f,
                )
        raise
    return {"iteration": final.get("iteration")}


# ---- launching the real command line (used by the process and resume tests) ----------------


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for a CLI subprocess: .venv/bin first on PATH (torchrun finds `train`),
    the checkout's root on PYTHONPATH (``--import tests.fixtures.X`` from any directory), no
    inherited torchrun variables or injected faults, wide console, one OpenMP thread per
    rank; ``extra`` variables on top."""
    import os
    import sys
    from pathlib import Path

    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "RANK",
            "LOCAL_RANK",
            "WORLD_SIZE",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "TORCHELASTIC_RUN_ID",
            "GROUP_RANK",
            "DISTRL_FAULTS",
            "DISTRL_SLOW_RANKS",
        )
    }
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env.update(COLUMNS="500", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if "PYTHONPATH" in extra and env.get("PYTHONPATH"):  # add to an install's own path
        extra = dict(extra, PYTHONPATH=extra["PYTHONPATH"] + os.pathsep + env["PYTHONPATH"])
    env.update(extra)
    return env


def run_cli(cmd: list[str], timeout: float, cwd=None, **env: str) -> tuple[int, str, str, float]:
    """Run ``cmd`` in its own session; on timeout kill that whole process group (torchrun and
    its ranks) and raise TimeoutError. Returns (exit code, stdout, stderr, seconds)."""
    import os
    import signal
    import subprocess
    import time

    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=cli_env(**env),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise TimeoutError(
            f"{' '.join(cmd)} still running after {timeout} s (killed)\nstdout:\n{out}\n"
            f"stderr:\n{err}"
        ) from None
    return proc.returncode, out, err, time.monotonic() - t0


def ps_run(
    rank: int,
    world: int,
    run_dir: str,
    dist: dict,
    agent: dict,
    fault: dict,
    resume: str | None = None,
) -> dict:
    """``run_training`` under a parameter-server strategy, with an optional fault and
    stragglers (``dist["slow_ranks"]``: 'RANK:FACTOR,...', tests.fixtures.slow):
    ``{"kill_worker": (rank, iteration)}`` SIGKILLs that worker on entering that update;
    ``{"server": "kill"|"stop", "after": seconds}`` kills or stops rank 0 that long after its
    first iteration record. Returns rank 0's console output and metrics, and on a worker the
    error it raised with the wall-clock time (both sides write times into ``run_dir``)."""
    import contextlib
    import io
    import json
    import os
    import signal
    import threading
    import time

    from distrl import Hooks
    from distrl.config import DistConfig, PSConfig
    from distrl.session import run_training
    from distrl.telemetry import read_metrics

    kill = fault.get("kill_worker")
    kill_after = fault.get("kill_after")  # (rank, iteration): SIGKILL after that record

    def hit_server() -> None:
        with open(os.path.join(run_dir, "server_fault.json"), "w") as f:
            json.dump({"t": time.time()}, f)
        os.kill(os.getpid(), signal.SIGKILL if fault["server"] == "kill" else signal.SIGSTOP)

    class Fault(Hooks):
        def before_update(self, runner) -> None:
            if kill and rank == kill[0] and runner.iteration == kill[1]:
                os.kill(os.getpid(), signal.SIGKILL)

        def after_iteration(self, runner, record) -> None:
            if kill_after and rank == kill_after[0] and record["iteration"] == kill_after[1]:
                os.kill(os.getpid(), signal.SIGKILL)
            if rank == 0 and "server" in fault and record["iteration"] == 1:
                threading.Timer(fault["after"], hit_server).start()

    ps = PSConfig(**dist.pop("ps", {}))
    slow = dist.pop("slow_ranks", "")
    cfg = small_config(dist.pop("num_envs", 16), distributed=True, **agent)
    cfg = dataclasses.replace(cfg, run_dir=run_dir, dist=DistConfig(ps=ps, **dist), resume=resume)
    if slow:  # every rank trains slow-cartpole; the ranks named run their env steps slower
        from tests.fixtures import slow as straggler

        os.environ[straggler.SLOW_RANKS_VAR] = slow
        cfg = dataclasses.replace(cfg, task=straggler.register("cartpole"))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            final = run_training(cfg, hooks=[Fault()])
    except BaseException as e:
        if rank > 0:
            with open(os.path.join(run_dir, f"worker{rank}_error.json"), "w") as f:
                json.dump({"t": time.time(), "type": type(e).__name__, "error": str(e)}, f)
        raise
    res: dict = {"iteration": final.get("iteration"), "version": final.get("dist/version")}
    if rank == 0:
        from pathlib import Path

        res["stdout"] = out.getvalue()
        res["records"] = read_metrics(Path(run_dir) / "metrics.jsonl")
    return res
