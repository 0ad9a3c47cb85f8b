"""Stable-Baselines3's shape for the users who come from it: ``distrl.PPO("MlpPolicy", env,
**sb3_kwargs).learn(total_timesteps).save(path)``, ``distrl.PPO.load(path)``,
``model.predict(obs)``; and ``distrl.DQN``, ``distrl.SAC``, ``distrl.TD3`` alike.

Each class maps SB3's keyword arguments, with SB3's meanings and defaults, onto a distrl
``TrainConfig`` and trains it with ``distrl.train`` (a run directory like any other). What SB3
means and distrl does the same way:

- ``env``: a Gymnasium id (``"CartPole-v1"``), a ``gymnasium.Env``, a factory of one, or a
  ``gymnasium.vector.VectorEnv`` (its envs); SB3's single env is ``--env.num-envs 1``, as
  SB3 steps it (``n_envs`` sets more, as ``make_vec_env`` would).
- ``learning_rate``: a constant, or a callable of SB3's ``progress_remaining`` (1 at the start,
  0 at the end) evaluated at each iteration, as SB3 evaluates it at each update. distrl's own
  default for PPO (an adaptive, KL-driven rate) is not used.
- ``policy="MlpPolicy"``: SB3's network (64 x 64, tanh, no observation normalization);
  ``policy_kwargs`` takes ``net_arch`` (a list, or ``dict(pi=..., vf=...)`` / ``dict(pi=...,
  qf=...)``), ``activation_fn`` (``torch.nn.Tanh``, ``ReLU``, ``ELU``) and ``log_std_init``.
- ``seed``, ``device``, ``verbose`` (0: nothing printed, as SB3's), ``tensorboard_log`` (TensorBoard
  events only when given, as in SB3; the run directory is created under it).

A keyword SB3 has and distrl does not map (``use_sde``, ``rollout_buffer_class``, ...) is
refused by name, never dropped. ``save`` writes the policy alone (``distrl.save``: a ``.pt``
file, the suffix added as SB3 adds ``.zip``); ``load`` reads it back for ``predict``, and a
later ``learn`` starts from those weights with a fresh optimizer (``--init-from``), where SB3
restores its optimizer too. A second ``learn`` on the same model continues its run (SB3's
``reset_num_timesteps=False``): the optimizer, env and RNG states from its checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from distrl.config import TrainConfig
from distrl.hooks import Hooks

_ACTIVATIONS = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.ELU: "elu"}


def _activation(fn: Any) -> str:
    for cls, name in _ACTIVATIONS.items():
        if fn is cls or isinstance(fn, cls):
            return name
    raise ValueError(
        f"policy_kwargs activation_fn={fn!r}: distrl's networks take torch.nn.Tanh, ReLU or ELU"
    )


def _policy(policy: str, kwargs: dict[str, Any] | None, model: type[_Model]) -> dict[str, Any]:
    """``PolicyConfig`` fields of SB3's ``policy`` and ``policy_kwargs`` (SB3 normalizes
    neither observations nor rewards)."""
    if policy != "MlpPolicy":
        raise ValueError(
            f"policy={policy!r}: distrl.{model.name} maps MlpPolicy; for images pass the env to "
            f"distrl.train (its CNN is chosen from the observations)"
        )
    out: dict[str, Any] = {"obs_normalization": False, "reward_normalization": False}
    out |= model.network
    critic_key = model.critic_key
    kwargs = dict(kwargs or {})
    arch = kwargs.pop("net_arch", None)
    if isinstance(arch, dict):
        out["actor_hidden"] = tuple(arch.get("pi", (64, 64)))
        out["critic_hidden"] = tuple(arch.get(critic_key, (64, 64)))
    elif arch is not None:
        out["actor_hidden"] = out["critic_hidden"] = tuple(arch)
    if "activation_fn" in kwargs:
        out["activation"] = _activation(kwargs.pop("activation_fn"))
    if "log_std_init" in kwargs:
        out["init_log_std"] = float(kwargs.pop("log_std_init"))
    kwargs.pop("ortho_init", None)  # distrl's init is orthogonal already
    if kwargs:
        raise ValueError(f"policy_kwargs {sorted(kwargs)}: not mapped onto distrl's policy")
    return out


class LearningRateSchedule(Hooks):
    """SB3's callable learning rate: ``fn(progress_remaining)`` at each iteration."""

    def __init__(self, fn: Callable[[float], float]) -> None:
        self.fn = fn

    def on_training_start(self, runner: Any) -> None:
        self._set(runner)

    def after_iteration(self, runner: Any, record: dict[str, Any]) -> bool | None:
        self._set(runner)
        return None

    def _set(self, runner: Any) -> None:
        remaining = 1.0 - runner.iteration / max(runner.cfg.agent.max_iterations, 1)
        runner.set_lr(float(self.fn(remaining)))


@contextlib.contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """distrl's console lines (start-up, evaluation, the summary table) held back while
    ``quiet``, as SB3's ``verbose=0`` prints nothing: a filter on the ``distrl`` logger passes
    warnings only (its level, which a user may have set, is left alone)."""
    logger = logging.getLogger("distrl")

    def warnings_only(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING

    if quiet:
        logger.addFilter(warnings_only)
    try:
        yield
    finally:
        logger.removeFilter(warnings_only)


class _Model:
    """What ``PPO``, ``DQN``, ``SAC`` and ``TD3`` share."""

    algorithm = "ppo"
    name = "PPO"
    critic_key = "vf"
    network: dict[str, Any] = {}
    """SB3's MlpPolicy where it differs from distrl's defaults for the algorithm."""

    def __init__(self, policy: str, env: Any, **kwargs: Any) -> None:
        from distrl.api import make_config
        from distrl.envs.registry import task_name

        self.env = env
        task = env if isinstance(env, str) else task_name(env)
        general = {k: kwargs.pop(k) for k in list(kwargs) if k in _GENERAL}
        self.n_envs = int(general.pop("n_envs", 1))
        self.verbose = int(general.pop("verbose", 1))
        lr = kwargs.get("learning_rate", self.defaults().get("learning_rate"))
        self.schedule = LearningRateSchedule(lr) if callable(lr) else None
        if callable(lr):
            kwargs["learning_rate"] = float(lr(1.0))
        sections = self.sections({**self.defaults(), **kwargs})
        sections["policy"] = _policy(policy, general.pop("policy_kwargs", None), type(self))
        sections.setdefault("env", {})["num_envs"] = self.n_envs
        log = general.pop("tensorboard_log", None)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        run_dir = None if log is None else str(Path(log) / f"{self.name}_{stamp}")
        seed = general.pop("seed", None)
        self.cfg: TrainConfig = make_config(
            task,
            algorithm=self.algorithm,
            seed=0 if seed is None else int(seed),
            device=general.pop("device", "auto"),
            progress=self.verbose > 0,
            tensorboard=log is not None,
            run_dir=run_dir,
            **sections,
        )
        self.policy: Any = None
        self.num_timesteps = 0
        self._run_dir: Path | None = None
        self._init_from: str | None = None

    # ---- SB3's keywords -> distrl's config sections
    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {}

    def sections(self, kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    @staticmethod
    def _refuse(kw: dict[str, Any], known: Sequence[str], name: str) -> None:
        unknown = sorted(set(kw) - set(known) - set(_IGNORED))
        if unknown:
            raise ValueError(
                f"distrl.{name}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
                f"not mapped onto distrl's config (docs/library.md, 'Coming from "
                f"Stable-Baselines3'); set the distrl field with distrl.train instead"
            )

    # ---- SB3's methods
    def learn(self, total_timesteps: int, callback: Any = None, **_: Any) -> _Model:
        """Train ``total_timesteps`` env steps (all envs together); called again, the run goes
        on from its checkpoint for that many more (SB3's model trains on, whatever its
        ``reset_num_timesteps``: only its step counter differs). SB3's ``log_interval``,
        ``tb_log_name``, ``progress_bar`` are accepted and unused."""
        from distrl.api import train
        from distrl.runner.hooks import Hooks

        hooks = [] if callback is None else list(callback) if isinstance(callback, list) else [
            callback]  # fmt: skip
        if not all(isinstance(h, Hooks) for h in hooks):
            raise ValueError(
                "callback: distrl takes distrl.Hooks (on_record, after_iteration returning False "
                "to stop, as SB3's _on_step) and distrl.EvalCallback, not SB3's BaseCallback"
            )
        if self.schedule is not None:
            hooks.insert(0, self.schedule)
        cfg, total = self.cfg, int(total_timesteps)
        if self._run_dir is not None:  # a second learn() trains on, as SB3's model does
            total += self.num_timesteps
            cfg = dataclasses.replace(cfg, run_dir=str(self._run_dir), resume="auto")
        elif self._init_from is not None:  # after load(): from the saved weights
            cfg = dataclasses.replace(cfg, init_from=self._init_from)
        agent = dataclasses.replace(cfg.agent, total_timesteps=total)
        with _quiet(self.verbose == 0):  # SB3's verbose=0 prints nothing
            result = train(dataclasses.replace(cfg, agent=agent), hooks=hooks)
        self.policy, self._run_dir, self._init_from = result.policy, result.run_dir, None
        self.num_timesteps = int(result.metrics.get("env_steps", total))
        self.result = result
        return self

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[Any, Any]:  # fmt: skip
        """SB3's ``predict``: (action, state); ``deterministic`` False samples, as SB3's."""
        if self.policy is None:
            raise ValueError(f"distrl.{self.name}: learn() or load() first: there is no policy")
        return self.policy.predict(observation, memory=state, deterministic=deterministic)

    def save(self, path: str | Path) -> Path:
        """The policy as one file (``.pt`` added when the name has no suffix, as SB3 adds
        ``.zip``); ``distrl.load_policy`` and ``load`` read it."""
        from distrl.api import save

        if self.policy is None:
            raise ValueError(f"distrl.{self.name}: learn() first: there is no policy to save")
        return save(self.policy, path, self.result.config, self.result.metrics.get(
            "iteration", 0), self.num_timesteps)  # fmt: skip

    @classmethod
    def load(cls, path: str | Path, env: Any = None, device: str = "auto", **kwargs: Any
             ) -> _Model:  # fmt: skip
        """A model whose policy is the saved one (``.pt`` added when the name has none); with
        ``env`` a later ``learn`` starts from these weights (fresh optimizer)."""
        from distrl.rundir import load_policy

        path = Path(path)
        if not path.exists() and path.suffix == "":
            path = path.with_suffix(".pt")
        policy, _ = load_policy(path)
        model = cls.__new__(cls)
        model.env, model.policy, model.num_timesteps = env, policy, 0
        model.schedule, model._run_dir, model._init_from = None, None, str(path)
        if env is not None:
            cls.__init__(model, "MlpPolicy", env, device=device, **kwargs)
            model.policy, model._init_from = policy, str(path)
        return model


_GENERAL = ("policy_kwargs", "seed", "device", "verbose", "tensorboard_log", "n_envs")
_IGNORED = ("stats_window_size", "_init_setup_model", "sde_sample_freq")


class PPO(_Model):
    """``distrl.PPO("MlpPolicy", env, **sb3_kwargs)``: SB3's PPO keywords and defaults."""

    network = {"actor_hidden": (64, 64), "critic_hidden": (64, 64), "activation": "tanh"}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"learning_rate": 3e-4, "n_steps": 2048, "batch_size": 64, "n_epochs": 10,
                "gamma": 0.99, "gae_lambda": 0.95, "clip_range": 0.2, "clip_range_vf": None,
                "normalize_advantage": True, "ent_coef": 0.0, "vf_coef": 0.5,
                "max_grad_norm": 0.5, "target_kl": None, "use_sde": False}  # fmt: skip

    def sections(self, kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        self._refuse(kw, list(self.defaults()), self.name)
        if kw["use_sde"]:
            raise ValueError("distrl.PPO: use_sde=True is not built (gSDE); leave it False")
        vf = kw["clip_range_vf"]
        if vf is not None and vf != kw["clip_range"]:
            raise ValueError(
                f"distrl.PPO: clip_range_vf={vf} differs from clip_range={kw['clip_range']}; "
                f"distrl clips the value with the policy's clip range (or not: None)"
            )
        rollout = int(kw["n_steps"]) * self.n_envs
        if rollout % int(kw["batch_size"]):
            raise ValueError(
                f"distrl.PPO: n_steps x n_envs = {rollout} is not a multiple of batch_size="
                f"{kw['batch_size']}; distrl splits each rollout into equal minibatches"
            )
        return {"agent": {
            "num_steps": int(kw["n_steps"]), "num_minibatches": rollout // int(kw["batch_size"]),
            "num_epochs": int(kw["n_epochs"]), "learning_rate": float(kw["learning_rate"]),
            "lr_schedule": "constant", "gamma": float(kw["gamma"]),
            "gae_lambda": float(kw["gae_lambda"]), "clip_coef": float(kw["clip_range"]),
            "clip_vloss": vf is not None, "norm_adv": bool(kw["normalize_advantage"]),
            "ent_coef": float(kw["ent_coef"]), "vf_coef": float(kw["vf_coef"]),
            "max_grad_norm": float(kw["max_grad_norm"]), "target_kl": kw["target_kl"],
        }}  # fmt: skip


class _OffPolicy(_Model):
    """SB3's keywords every off-policy learner shares."""

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {"learning_rate": 3e-4, "buffer_size": 1_000_000, "learning_starts": 100,
                "batch_size": 256, "tau": 0.005, "gamma": 0.99, "train_freq": 1,
                "gradient_steps": 1, "n_steps": 1}  # fmt: skip

    def sections(self, kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        self._refuse(kw, [*self.defaults(), "replay_buffer_class", "replay_buffer_kwargs",
                          "optimize_memory_usage"], self.name)  # fmt: skip
        for key in ("replay_buffer_class", "replay_buffer_kwargs"):
            if kw.get(key) is not None:
                raise ValueError(f"distrl.{self.name}: {key} is not mapped (distrl's replay)")
        train_freq = kw["train_freq"]
        if not isinstance(train_freq, int):
            raise ValueError(f"distrl.{self.name}: train_freq={train_freq!r}: an int (steps)")
        steps = train_freq if int(kw["gradient_steps"]) == -1 else int(kw["gradient_steps"])
        # an iteration holds at least 2 transitions (distrl's batch check): k of SB3's
        # train_freq steps and k times its gradient steps, the same updates per env step
        k = max(1, -(-2 // (train_freq * self.n_envs)))
        return {
            "agent": {"num_steps": k * train_freq, "num_minibatches": 1,
                      "learning_rate": float(kw["learning_rate"]),
                      "lr_schedule": "constant", "gamma": float(kw["gamma"])},
            "offpolicy": {"buffer_size": int(kw["buffer_size"]),
                          "learning_starts": int(kw["learning_starts"]),
                          "batch_size": int(kw["batch_size"]), "tau": float(kw["tau"]),
                          "updates": k * steps, "n_step": int(kw["n_steps"])},
        }  # fmt: skip


class DQN(_OffPolicy):
    """``distrl.DQN("MlpPolicy", env, **sb3_kwargs)``: SB3's DQN keywords and defaults."""

    algorithm, name, critic_key = "dqn", "DQN", "qf"

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), "learning_rate": 1e-4, "learning_starts": 100,
                "batch_size": 32, "tau": 1.0, "train_freq": 4, "target_update_interval": 10_000,
                "exploration_fraction": 0.1, "exploration_initial_eps": 1.0,
                "exploration_final_eps": 0.05, "max_grad_norm": 10.0}  # fmt: skip

    def sections(self, kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        own = ("target_update_interval", "exploration_fraction", "exploration_initial_eps",
               "exploration_final_eps", "max_grad_norm")  # fmt: skip
        self._refuse(kw, list(self.defaults()), self.name)
        out = super().sections({k: v for k, v in kw.items() if k not in own})
        updates_per_step = out["offpolicy"]["updates"] / max(int(kw["train_freq"]), 1)
        out["offpolicy"] |= {
            # SB3 counts the target's interval in env steps; distrl in updates
            "target_interval": max(1, round(int(kw["target_update_interval"]) * updates_per_step)),
            "eps_start": float(kw["exploration_initial_eps"]),
            "eps_end": float(kw["exploration_final_eps"]),
            "eps_fraction": float(kw["exploration_fraction"]),
        }
        out["agent"]["max_grad_norm"] = float(kw["max_grad_norm"])
        return out


class SAC(_OffPolicy):
    """``distrl.SAC("MlpPolicy", env, **sb3_kwargs)``: SB3's SAC keywords and defaults."""

    algorithm, name, critic_key = "sac", "SAC", "qf"

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), "ent_coef": "auto", "target_entropy": "auto"}

    def sections(self, kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        ent, target = kw.pop("ent_coef"), kw.pop("target_entropy")
        out = super().sections(kw)
        if isinstance(ent, str) and not ent.startswith("auto"):
            raise ValueError(f"distrl.SAC: ent_coef={ent!r}: 'auto' or a number")
        out["offpolicy"]["alpha"] = None if isinstance(ent, str) else float(ent)
        out["offpolicy"]["target_entropy"] = None if target == "auto" else float(target)
        return out


class TD3(_OffPolicy):
    """``distrl.TD3("MlpPolicy", env, **sb3_kwargs)``: SB3's TD3 keywords and defaults
    (``action_noise`` is distrl's Gaussian ``exploration_noise``, in half-ranges)."""

    algorithm, name, critic_key = "td3", "TD3", "qf"

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {**super().defaults(), "learning_rate": 1e-3, "policy_delay": 2,
                "target_policy_noise": 0.2, "target_noise_clip": 0.5}  # fmt: skip

    def sections(self, kw: dict[str, Any]) -> dict[str, dict[str, Any]]:
        extra = {k: kw.pop(k) for k in ("policy_delay", "target_policy_noise",
                                        "target_noise_clip")}  # fmt: skip
        out = super().sections(kw)
        out["offpolicy"] |= {"policy_delay": int(extra["policy_delay"]),
                             "policy_noise": float(extra["target_policy_noise"]),
                             "noise_clip": float(extra["target_noise_clip"])}  # fmt: skip
        return out


__all__ = ["DQN", "PPO", "SAC", "TD3", "LearningRateSchedule"]
