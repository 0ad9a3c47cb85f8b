"""Your own actor and critic bodies: a LayerNorm MLP, registered and trained on cartpole.

distrl keeps the observation normalizer, the action distribution and the clipping around them:
the actor maps normalized observations [N, obs_dim] to logits or means [N, action_dim], the
critic maps them to values [N, 1].
"""

from torch import nn

import distrl


def body(inputs: int, outputs: int, width: int = 64) -> nn.Module:
    return nn.Sequential(
        nn.Linear(inputs, width), nn.LayerNorm(width), nn.ELU(),
        nn.Linear(width, width), nn.LayerNorm(width), nn.ELU(),
        nn.Linear(width, outputs),
    )  # fmt: skip


distrl.register_network(
    "layernorm-mlp",
    actor=lambda obs_dim, action_dim: body(obs_dim, action_dim),
    critic=lambda obs_dim: body(obs_dim, 1),
)

if __name__ == "__main__":
    cfg = distrl.make_config("cartpole", policy={"network": "layernorm-mlp"})
    result = distrl.train(cfg)
    if result.is_main:
        print(result.policy.actor)
        print(f"cartpole: return {result.metrics['episode_return_mean']:.1f} of 500")
