"""Train cartpole to a return of 475, export the policy to ONNX, check onnxruntime against it."""

import numpy as np
import onnxruntime
import torch

import distrl

result = distrl.train("cartpole")  # the task's tuned defaults; add overrides as keywords
final = result.metrics
print(f"return {final['episode_return_mean']:.1f} after {final['env_steps']:,} steps")
assert final["episode_return_mean"] >= 475

exported = distrl.export(result.run_dir, "onnx")  # deterministic actor, normalizer baked in
session = onnxruntime.InferenceSession(str(exported.path))
obs = torch.randn(1000, 4) * torch.tensor([1.0, 1.0, 0.1, 1.0])  # around upright
ours = result.policy.act_deterministic(obs).numpy()
theirs = session.run(None, {session.get_inputs()[0].name: obs.numpy()})[0]
print(f"onnxruntime agrees on {np.mean(ours == theirs):.1%} of {len(obs)} actions")
assert np.array_equal(ours, theirs)
