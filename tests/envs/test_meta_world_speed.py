"""Meta-World's exact fast paths (``distrl.envs.metaworld_3_1_patches._ExactFastPaths``): for
every MT10 task, an env with them and an unmodified Meta-World env of the same goal variant,
given the same actions, return bit-for-bit the same observations, rewards, info (success
included) and truncation, through a truncation and two resets."""

from __future__ import annotations

import numpy as np
import pytest

from distrl.envs.meta_world import MT10_TASKS, mt10_benchmark
from distrl.envs.metaworld_3_1_patches import fast_env_class

metaworld = pytest.importorskip("metaworld")

STEPS = 150
EPISODE = 60  # a short horizon, so each run truncates (and resets) twice


def same_bits(a: object, b: object) -> bool:
    a_, b_ = np.asarray(a), np.asarray(b)
    return a_.dtype == b_.dtype and a_.shape == b_.shape and a_.tobytes() == b_.tobytes()


@pytest.mark.parametrize("task", MT10_TASKS)
def test_fast_paths_match_unmodified_metaworld(task: str) -> None:
    from metaworld.policies import ENV_POLICY_MAP

    bench = mt10_benchmark(0)
    variants = [t for t in bench.train_tasks if t.env_name == task]
    cls = bench.train_classes[task]
    fast, plain = fast_env_class(task, cls)(), cls()
    assert isinstance(fast, cls) and type(fast) is not cls
    # Meta-World's scripted policy plus noise reaches, grasps and pushes the objects, so contact
    # forces (touching_object) and object rotations (the quaternions) are exercised.
    expert = ENV_POLICY_MAP[task]()
    rng = np.random.default_rng(MT10_TASKS.index(task))
    touched = 0
    for env in (fast, plain):
        env.max_path_length = EPISODE
    for step in range(STEPS):
        if step % EPISODE == 0:
            variant = variants[(step // EPISODE) * 7 % len(variants)]
            outs = []
            for env in (fast, plain):
                env.set_task(variant)
                outs.append(env.reset())
            (obs_f, info_f), (obs_p, info_p) = outs
            assert same_bits(obs_f, obs_p) and info_f.keys() == info_p.keys()
        action = expert.get_action(obs_p) + rng.normal(0.0, 0.3, 4)
        action = np.clip(action, -1.0, 1.0).astype(np.float32)
        obs_f, rew_f, term_f, trunc_f, info_f = fast.step(action)
        obs_p, rew_p, term_p, trunc_p, info_p = plain.step(action)
        assert same_bits(obs_f, obs_p), (step, obs_f - obs_p)
        assert same_bits(rew_f, rew_p), (step, rew_f, rew_p)
        assert (term_f, trunc_f) == (term_p, trunc_p)
        assert trunc_p == ((step + 1) % EPISODE == 0)
        assert info_f.keys() == info_p.keys()
        for key in info_p:
            assert same_bits(info_f[key], info_p[key]), (step, key, info_f[key], info_p[key])
        if task in ("push-v3", "pick-place-v3"):  # the MT10 tasks that call touching_object
            main = plain._get_id_main_object()
            touching = type(plain).touching_object(plain, main)
            assert bool(fast.touching_object(main)) == bool(touching)
            touched += bool(touching)
    if task in ("push-v3", "pick-place-v3"):
        assert touched > 0, "the object was never grasped: touching_object not exercised"
    fast.close()
    plain.close()


def test_mt10_env_steps_the_fast_classes() -> None:
    from distrl.envs.meta_world import MetaWorldMT10

    env = MetaWorldMT10("door-open-v3", 2, max_episode_steps=5)
    cls = mt10_benchmark(0).train_classes["door-open-v3"]
    assert all(type(e) is fast_env_class("door-open-v3", cls) for e in env.envs)
    env.close()


def test_quaternion_matches_scipy_on_random_rotations() -> None:
    """The quaternion of 5,000 random rotations (all four branches of scipy's algorithm) has
    scipy's bits; matrices scipy re-orthogonalises or rejects go to scipy itself."""
    from scipy.spatial.transform import Rotation

    from distrl.envs.metaworld_3_1_patches import _scipy_quat_from_matrix

    mats = Rotation.random(5_000, random_state=0).as_matrix()
    mats = np.concatenate([mats, [np.eye(3), np.diag([1.0, -1, -1]), np.diag([-1.0, 1, -1])]])
    for m in mats:
        assert same_bits(_scipy_quat_from_matrix(m.reshape(9)), Rotation.from_matrix(m).as_quat())
    skewed = np.eye(3) * 1.01
    assert same_bits(
        _scipy_quat_from_matrix(skewed.reshape(9)), Rotation.from_matrix(skewed).as_quat()
    )
    with pytest.raises(ValueError, match="Non-positive determinant"):
        _scipy_quat_from_matrix(np.diag([1.0, 1, -1]).reshape(9))


def test_tolerance_matches_reward_utils() -> None:
    """The fast ``tolerance`` the reward code is rebound to returns the original's bits (and
    type) for scalars of both sigmoids MT10 uses, in and out of bounds, margin 0 included; it
    defers to the original for arrays and invalid arguments."""
    from metaworld.utils import reward_utils

    from distrl.envs.metaworld_3_1_patches import _fast_reward_utils

    fast = _fast_reward_utils().tolerance
    rng = np.random.default_rng(0)
    for _ in range(4000):
        x = rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-6, 1)
        lower = float(rng.choice([0.0, rng.uniform(0, 0.1)]))
        bounds = (lower, lower + float(rng.choice([0.0, rng.uniform(0, 0.1)])))
        margin = rng.choice([0.0, 0, 10.0 ** rng.uniform(-3, 0)])
        for x_ in (float(x), np.float64(x)):
            for sigmoid in ("long_tail", "gaussian"):
                args = (x_, bounds, margin, sigmoid)
                want, got = reward_utils.tolerance(*args), fast(*args)
                assert type(got) is type(want) and same_bits(got, want), (args, got, want)
    xs = np.array([0.01, 0.5])
    assert same_bits(
        fast(xs, (0, 0.05), 0.3, "long_tail"),
        reward_utils.tolerance(xs, (0, 0.05), 0.3, "long_tail"),
    )
    with pytest.raises(ValueError, match="Lower bound"):
        fast(0.1, (0.2, 0.1), 0.3, "long_tail")
