"""Stable-Baselines3's workflow in distrl: train with a callback that stops at a return of 475,
predict on numpy observations of a Gymnasium env, evaluate, save to one file, load it back."""

import gymnasium as gym

import distrl


class StopAtReturn(distrl.Hooks):
    """SB3's StopTrainingOnRewardThreshold: returning False from after_iteration stops."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def after_iteration(self, runner, record):
        mean = record.get("episode_return_mean")  # over every rank's newest episodes
        return mean is None or mean < self.threshold


result = distrl.train("cartpole", hooks=[StopAtReturn(475)])  # SB3: PPO(...).learn(callback=)
print(f"stopped at iteration {result.metrics['iteration']}: {result.metrics['stopped']}")

env = gym.make("CartPole-v1")  # distrl's cartpole is Gymnasium's, batched in torch
obs, _ = env.reset(seed=0)
episode_return, done = 0.0, False
while not done:
    action, _ = result.policy.predict(obs, deterministic=True)  # numpy in, numpy out
    obs, reward, terminated, truncated, _ = env.step(int(action))
    episode_return += float(reward)
    done = terminated or truncated
print(f"gymnasium CartPole-v1: one episode, return {episode_return:.0f}")

mean, std = distrl.evaluate(result, episodes=20)  # SB3: evaluate_policy(model, env, 20)
print(f"evaluate: return {mean:.1f} +/- {std:.1f} over 20 episodes")

path = result.save("cartpole_policy.pt")  # SB3: model.save(path)
policy, cfg = distrl.load_policy(path)  # SB3: PPO.load(path)
again = distrl.evaluate(policy, episodes=20, config=cfg)
print(f"loaded {path}: return {again.mean:.1f} +/- {again.std:.1f} over 20 episodes")
