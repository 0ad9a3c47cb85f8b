"""Network registry: the actor and critic bodies of ``ActorCritic``, chosen by name.

A network is a pair of factories, ``actor(in_features, action_dim)`` and
``critic(in_features)``, each returning an ``nn.Module``, and optionally a shared
``encoder(obs_shape)`` (the convolutional trunks of ``policy/encoders.py``):

  encoder: raw observation rows [N, obs_dim] (uint8 for images) -> features [N, F]
  actor:   inputs [N, in_features] -> [N, action_dim]: logits (discrete actions) or Gaussian
           means (continuous; distrl adds a learned, state-independent log std)
  critic:  inputs [N, in_features] -> [N, 1]: the value V(s); with PopArt
           (--policy.popart-tasks K) [N, K], ending in an nn.Linear with K outputs

The inputs are the normalized observations (in_features = obs_dim), the encoder's features, or
with ``--policy.recurrent`` the recurrent core's output (``encoders.Recurrent``).

``ActorCritic`` owns everything around them: the running observation normalizer (which travels
with the parameters), the action distribution, clipping continuous actions to the env's bounds
and the optional return scaling. So a network never sees raw observations and never samples.
``--policy.network NAME`` (``PolicyConfig.network``) picks one; ``mlp`` (the default) builds the
``--policy.actor-hidden``/``--policy.critic-hidden`` MLPs with orthogonal initialization;
``nature-cnn`` and ``minatar-cnn`` are the built-in image networks and ``multi-input`` the one
for Dict observations of images and vectors (``policy/encoders.py``). A Dict env's rows are bytes
whose ``obs_shape`` is an ``envs.core.ObsLayout``: a registered encoder receives that layout as
its ``obs_shape`` and reads each part's slice of the row from its fields.

Registrations live in the process that makes them: a script that registers a network and is
started by torchrun registers it in every rank, as every rank runs the script.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from distrl.config import PolicyConfig
from distrl.envs.core import ObsLayout
from distrl.policy import encoders


@dataclass(frozen=True)
class Network:
    """Factories of the actor and critic bodies (see the module docstring for their shapes),
    and optionally of a shared encoder ``encoder(obs_shape)`` whose features [N, F] the bodies
    take instead of the observations (they are then called with F as their input width)."""

    actor: Callable[..., nn.Module] | None
    critic: Callable[..., nn.Module] | None
    encoder: Callable[[tuple[int, ...]], nn.Module] | None = None
    mlp_heads: bool = False
    """The heads are the ``--policy.actor-hidden``/``--policy.critic-hidden`` MLPs on the
    encoder's features (``actor``/``critic`` unused): multi-input, as SB3's MultiInputPolicy."""


_BUILT_IN: dict[str, Network] = {
    "nature-cnn": Network(
        encoders.linear_head(0.01), encoders.linear_head(1.0), encoders.nature_cnn
    ),
    "minatar-cnn": Network(
        encoders.linear_head(0.01), encoders.linear_head(1.0), encoders.minatar_cnn
    ),
    "multi-input": Network(None, None, encoders.multi_input, mlp_heads=True),
}
_IMAGE_ENCODERS = {"nature-cnn": encoders.nature_cnn, "minatar-cnn": encoders.minatar_cnn}
"""The built-in image networks' encoders, which take ``--policy.layer-norm`` too."""
_IMAGE_ONLY = tuple(_IMAGE_ENCODERS)
_NETWORKS: dict[str, Network] = dict(_BUILT_IN)


def register_network(
    name: str,
    actor: Callable[..., nn.Module],
    critic: Callable[..., nn.Module],
    *,
    encoder: Callable[[tuple[int, ...]], nn.Module] | None = None,
    replace: bool = False,
) -> None:
    """Make ``--policy.network name`` build ``actor(in_features, action_dim)`` and
    ``critic(in_features)``; ``encoder(obs_shape)``, when given, is shared by both and maps the
    raw observation rows (uint8 for images) to the features they take. Registering a taken
    name raises unless ``replace``; the built-in names cannot be replaced."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a network name must be a non-empty string, got {name!r}")
    if name == "mlp" or name in _BUILT_IN or (name in _NETWORKS and not replace):
        raise ValueError(
            f"network {name!r} is already registered; pick another name"
            + ("" if name == "mlp" or name in _BUILT_IN else " or pass replace=True")
        )
    if not callable(actor) or not callable(critic) or not (encoder is None or callable(encoder)):
        raise ValueError(
            f"register_network({name!r}): actor, critic (and encoder) must be callables "
            f"returning nn.Module: actor(in_features, action_dim), critic(in_features), "
            f"encoder(obs_shape)"
        )
    _NETWORKS[name] = Network(actor, critic, encoder)


def is_built_in(name: str) -> bool:
    """Whether ``name`` is one of distrl's own networks (every process has those)."""
    return name == "mlp" or name in _BUILT_IN


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


def _module(name: str, role: str, module: object) -> nn.Module:
    if not isinstance(module, nn.Module):
        raise ValueError(
            f"network {name!r}: its {role} factory returned {type(module).__name__}, not a "
            f"torch.nn.Module"
        )
    return module


def build_encoder(cfg: PolicyConfig, obs_shape: tuple[int, ...]) -> nn.Module | None:
    """The shared encoder of ``cfg.network`` for observations of ``obs_shape`` (None: the
    bodies take the normalized observations themselves)."""
    if isinstance(obs_shape, ObsLayout) and (cfg.network == "mlp" or cfg.network in _IMAGE_ONLY):
        raise ValueError(
            f"this env's observations have several parts ({obs_shape!r}), packed as bytes in "
            f"one row; --policy.network {cfg.network} cannot read them: use --policy.network "
            f"multi-input (a CNN per image, the vectors beside its features), or a network "
            f"registered for them (its encoder receives the layout)"
        )
    if cfg.network == "mlp":
        return None
    check_network(cfg.network)
    if cfg.network in _IMAGE_ENCODERS:
        encoder = _IMAGE_ENCODERS[cfg.network](obs_shape, layer_norm=cfg.layer_norm)
        return _module(cfg.network, "encoder", encoder)
    make = _NETWORKS[cfg.network].encoder
    return None if make is None else _module(cfg.network, "encoder", make(obs_shape))


def build(
    cfg: PolicyConfig,
    in_features: int,
    action_dim: int,
    mlp: Callable[[int, tuple[int, ...], int, str, float], nn.Sequential],
) -> tuple[nn.Module, nn.Module]:
    """(actor, critic) for ``cfg.network`` taking ``in_features`` inputs (the observations,
    the encoder's features or the recurrent core's); ``mlp`` builds the default (passed in by
    ``actor_critic`` so that this module does not import it). With PopArt
    (``cfg.popart_tasks``) the critic has one output per task."""
    values = max(cfg.popart_tasks, 1)
    if cfg.network == "mlp" or (cfg.network in _BUILT_IN and _BUILT_IN[cfg.network].mlp_heads):
        return (
            mlp(in_features, cfg.actor_hidden, action_dim, cfg.activation, 0.01),
            mlp(in_features, cfg.critic_hidden, values, cfg.activation, 1.0),
        )
    check_network(cfg.network)
    net = _NETWORKS[cfg.network]
    assert net.actor is not None and net.critic is not None  # register_network requires them
    critic = (
        net.critic(in_features, values) if cfg.network in _BUILT_IN else net.critic(in_features)
    )
    return (
        _module(cfg.network, "actor", net.actor(in_features, action_dim)),
        _module(cfg.network, "critic", critic),
    )
