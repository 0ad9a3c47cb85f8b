"""Network registry: the actor and critic bodies of ``ActorCritic``, chosen by name.

A network is a pair of factories, ``actor(obs_dim, action_dim)`` and ``critic(obs_dim)``, each
returning an ``nn.Module``:

  actor:  normalized observations [N, obs_dim] -> [N, action_dim]: logits (discrete actions) or
          Gaussian means (continuous; distrl adds a learned, state-independent log std)
  critic: normalized observations [N, obs_dim] -> [N, 1]: the value V(s); with PopArt
          (--policy.popart-tasks K) [N, K], ending in an nn.Linear with K outputs

``ActorCritic`` owns everything around them: the running observation normalizer (which travels
with the parameters), the action distribution, clipping continuous actions to the env's bounds
and the optional return scaling. So a network never sees raw observations and never samples.
``--policy.network NAME`` (``PolicyConfig.network``) picks one; ``mlp`` (the default) builds the
``--policy.actor-hidden``/``--policy.critic-hidden`` MLPs with orthogonal initialization.

Registrations live in the process that makes them: a script that registers a network and is
started by torchrun registers it in every rank, as every rank runs the script.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from distrl.config import PolicyConfig


@dataclass(frozen=True)
class Network:
    """Factories of the actor and critic bodies (see the module docstring for their shapes)."""

    actor: Callable[[int, int], nn.Module]
    critic: Callable[[int], nn.Module]


_NETWORKS: dict[str, Network] = {}


def register_network(
    name: str,
    actor: Callable[[int, int], nn.Module],
    critic: Callable[[int], nn.Module],
    *,
    replace: bool = False,
) -> None:
    """Make ``--policy.network name`` build ``actor(obs_dim, action_dim)`` and
    ``critic(obs_dim)``. Registering a taken name raises unless ``replace``."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a network name must be a non-empty string, got {name!r}")
    if name == "mlp" or (name in _NETWORKS and not replace):
        raise ValueError(
            f"network {name!r} is already registered; pick another name"
            + ("" if name == "mlp" else " or pass replace=True")
        )
    if not callable(actor) or not callable(critic):
        raise ValueError(
            f"register_network({name!r}): actor and critic must be callables returning "
            f"nn.Module: actor(obs_dim, action_dim), critic(obs_dim)"
        )
    _NETWORKS[name] = Network(actor, critic)


def network_names() -> list[str]:
    return ["mlp", *_NETWORKS]


def check_network(name: str) -> None:
    """Refuse a ``--policy.network`` that is not registered in this process (``distrl train``
    runs it before anything starts; ``build`` again where the policy is made)."""
    if name != "mlp" and name not in _NETWORKS:
        raise ValueError(
            f"--policy.network {name!r} is not registered in this process (known: "
            f"{', '.join(network_names())}); call distrl.register_network({name!r}, "
            f"actor=..., critic=...) before building the policy, in every process that builds "
            f"it (training ranks, and the process that plays or exports the run)"
        )


def build(
    cfg: PolicyConfig,
    obs_dim: int,
    action_dim: int,
    mlp: Callable[[int, tuple[int, ...], int, str, float], nn.Sequential],
) -> tuple[nn.Module, nn.Module]:
    """(actor, critic) for ``cfg.network``; ``mlp`` builds the default (passed in by
    ``actor_critic`` so that this module does not import it). With PopArt
    (``cfg.popart_tasks``) the critic has one output per task."""
    if cfg.network == "mlp":
        return (
            mlp(obs_dim, cfg.actor_hidden, action_dim, cfg.activation, 0.01),
            mlp(obs_dim, cfg.critic_hidden, max(cfg.popart_tasks, 1), cfg.activation, 1.0),
        )
    check_network(cfg.network)
    net = _NETWORKS[cfg.network]
    actor, critic = net.actor(obs_dim, action_dim), net.critic(obs_dim)
    for role, module in (("actor", actor), ("critic", critic)):
        if not isinstance(module, nn.Module):
            raise ValueError(
                f"network {cfg.network!r}: its {role} factory returned "
                f"{type(module).__name__}, not a torch.nn.Module"
            )
    return actor, critic
