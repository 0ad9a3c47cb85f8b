"""Your own batched torch env, registered and trained; the same script runs under torchrun:

python examples/own_env.py
torchrun --nproc-per-node 2 examples/own_env.py
"""

import torch

import distrl


class GoTo(distrl.VecEnv):
    """Move a point on a line to its goal: obs (position, goal), action a step in [-1, 1]."""

    def __init__(self, num_envs, device, max_episode_steps=None):
        self.num_envs, self.obs_dim, self.device = num_envs, 2, torch.device(device)
        self.action_space = distrl.ActionSpace("continuous", low=(-1.0,), high=(1.0,))
        self.max_episode_steps = max_episode_steps or 50
        self.gen = torch.Generator(device=self.device)
        self.state = torch.zeros(num_envs, 2, device=self.device)  # position, goal
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def reset(self, seed=None):
        if seed is not None:
            self.gen.manual_seed(seed)
        self._restart(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.state.clone()

    def _restart(self, done):
        new = torch.rand(self.num_envs, 2, generator=self.gen, device=self.device) * 2 - 1
        self.state[done], self.t[done] = new[done], 0

    def step(self, actions):
        self.state[:, 0] = (self.state[:, 0] + 0.1 * actions[:, 0]).clamp(-1.0, 1.0)
        self.t += 1
        reward = -(self.state[:, 0] - self.state[:, 1]).abs()
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        truncated = self.t >= self.max_episode_steps
        final_obs = self.state.clone()
        self._restart(truncated)
        return self.state.clone(), reward, terminated, truncated, {"final_obs": final_obs}


distrl.check_env(GoTo(4, "cpu"))  # shapes, dtypes and devices against the VecEnv contract
distrl.register_task("goto", make_env=GoTo)

if __name__ == "__main__":
    cfg = distrl.make_config("goto", env={"num_envs": 64}, agent={"max_iterations": 40})
    result = distrl.train(cfg)
    if result.is_main:  # under torchrun every rank returns; rank 0 reports
        obs = torch.tensor([[0.0, 0.5], [0.5, -0.5]])
        print("steps toward the goals:", result.policy.act_deterministic(obs).flatten().tolist())
        print(f"goto: return {result.metrics['episode_return_mean']:.1f} (a still point: ~-33)")
