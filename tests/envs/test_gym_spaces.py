"""The Gymnasium adapter's image, Dict and MultiDiscrete spaces: rows, channel order, the Dict
row's layout read back by the multi-input network, actions with ``start`` offsets, the contract
(``check_env``), two iterations of ``distrl.train``, and every refusal by its message; the hints
for a missing optional dependency (ale-py, Box2D, MuJoCo)."""

from __future__ import annotations

import copy
import sys
from types import SimpleNamespace

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

import distrl
from distrl.config import PolicyConfig
from distrl.envs import make_env
from distrl.envs.core import ActionSpace, ObsLayout
from distrl.envs.gym import GymVecEnv, ObsSpec, _missing_dependency, check_spaces, resolve_env_id
from distrl.policy import ActorCritic
from distrl.policy import distributions as D
from distrl.policy.encoders import MultiInputEncoder, float32_from_bytes
from distrl.storage.rollout import WINDOW, RolloutBuffer
from distrl.storage.rollout_codec import RolloutCodec
from tests.helpers import api_train

IMAGE_HWC = spaces.Box(0, 255, (6, 5, 3), np.uint8)
DICT = spaces.Dict(
    {
        "pixels": IMAGE_HWC,
        "pos": spaces.Box(-2.0, 2.0, (2,), np.float32),
        "mode": spaces.Discrete(3, start=1),
    }
)
MULTI = spaces.MultiDiscrete([3, 2], start=[1, 0])


class TinyEnv(gymnasium.Env):
    """Observations from the space's own sampler (seeded), MultiDiscrete actions checked to lie
    in the space (with its start offsets); reward 1 when the first choice is its middle value;
    episodes of 3 + (seeded draw) steps, so that they end inside a test's few steps."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space = MULTI):
        # its own copy: the sampler's generator is the env's (seeded at reset)
        self.observation_space = copy.deepcopy(observation_space)
        self.action_space = action_space
        self.actions: list = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.t, self.length = 0, 3 + int(self.np_random.integers(4))
        return self.observation_space.sample(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype))
        self.actions.append(np.array(action))
        self.t += 1
        reward = float(np.asarray(action).reshape(-1)[0] == 2)
        return self.observation_space.sample(), reward, self.t >= self.length, False, {}


for _name, _space in (("image", IMAGE_HWC), ("dict", DICT)):
    gymnasium.register(
        f"distrl-test/Tiny{_name.title()}-v0",
        entry_point=lambda s=_space, **kw: TinyEnv(s, **kw),
        max_episode_steps=5,
    )


# ---- observations ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "chw", "last"),
    [
        ((6, 5, 3), (3, 6, 5), True),  # HWC: the last dimension is the smallest
        ((3, 6, 5), (3, 6, 5), False),  # CHW: the first is
        ((6, 2, 5), (5, 6, 2), True),  # the middle: SB3 warns and takes channels last
        ((4, 4, 4), (4, 4, 4), False),  # a tie: argmin says the first
        ((6, 5), (1, 6, 5), False),  # gray HxW: one channel
    ],
)
def test_image_channel_order_follows_sb3(shape, chw, last) -> None:
    spec = ObsSpec("x", spaces.Box(0, 255, shape, np.uint8))
    assert spec.kind == "image" and spec.obs_shape == chw and spec.obs_dtype == torch.uint8
    obs = np.random.default_rng(0).integers(0, 256, (2, *shape), dtype=np.uint8)
    want = obs.transpose(0, 3, 1, 2) if last else obs
    np.testing.assert_array_equal(spec.rows(obs, 2), want.reshape(2, -1))


def test_non_image_boxes_stay_float_vectors() -> None:
    for space in (
        spaces.Box(0, 1, (6, 5, 3), np.uint8),  # bounds not 0..255: SB3 does not call it an image
        spaces.Box(0.0, 1.0, (6, 5, 3), np.float32),
    ):
        spec = ObsSpec("x", space)
        assert spec.kind == "vector" and spec.obs_shape == (90,)
        assert spec.obs_dtype == torch.float32


def test_image_env_gives_uint8_chw_rows_and_final_obs() -> None:
    env = GymVecEnv("distrl-test/TinyImage-v0", 3, seed=1)
    ref = TinyEnv(IMAGE_HWC)
    assert env.obs_shape == (3, 6, 5) and env.obs_dtype == torch.uint8 and env.obs_dim == 90
    assert env.action_space == ActionSpace("multi_discrete", nvec=(3, 2))
    obs = env.reset()
    first, _ = ref.reset(seed=1)  # sub-env 0 is seeded with seed + 0
    assert torch.equal(obs[0], torch.from_numpy(first.transpose(2, 0, 1).reshape(-1)))
    ended = False
    for _ in range(8):
        action = torch.tensor([[0, 1], [1, 0], [2, 1]])
        obs, _, term, trunc, info = env.step(action)
        ref_obs, *_ = ref.step(action[0].numpy() + [1, 0])
        want = torch.from_numpy(ref_obs.transpose(2, 0, 1).reshape(-1))
        assert torch.equal(info["final_obs"][0], want)  # the observation the step returned
        done = term | trunc
        if done[0]:
            ended = True
            assert not torch.equal(obs[0], info["final_obs"][0])  # the next episode's first
            ref.reset()
    assert ended
    # the policy's 0-based actions arrive shifted by MultiDiscrete's start
    sub = env.vector_env.envs[1].unwrapped
    assert all(list(a) == [2, 0] for a in sub.actions)
    distrl.check_env(env)
    env.close()


def test_dict_row_layout_is_read_back_by_the_multi_input_network() -> None:
    spec = ObsSpec("x", DICT)
    layout = spec.obs_shape
    assert isinstance(layout, ObsLayout) and spec.obs_dtype == torch.uint8
    # Gymnasium sorts the keys; images first, then the vectors, each 4-byte aligned
    assert [(f.key, f.kind, f.shape) for f in layout.fields] == [
        ("pixels", "image", (3, 6, 5)),
        ("mode", "vector", (3,)),
        ("pos", "vector", (2,)),
    ]
    assert [f.offset for f in layout.fields] == [0, 92, 104] and spec.obs_dim == 112
    DICT.seed(3)
    batch = [DICT.sample() for _ in range(4)]
    obs = {k: np.stack([b[k] for b in batch]) for k in DICT.spaces}
    rows = torch.from_numpy(spec.rows(obs, 4))
    assert rows.dtype == torch.uint8 and rows.shape == (4, 112)
    pixels = rows[:, :90].reshape(4, 3, 6, 5).permute(0, 2, 3, 1)
    assert torch.equal(pixels, torch.from_numpy(obs["pixels"]))
    enc = MultiInputEncoder(layout)
    assert enc.out_features == 128 + 5  # the small CNN (below 36x36) + 3 one-hot + 2 values
    vectors = enc(rows)[:, 128:]
    one_hot = torch.nn.functional.one_hot(torch.from_numpy(obs["mode"]) - 1, 3).float()
    assert torch.equal(vectors, torch.cat([one_hot, torch.from_numpy(obs["pos"])], 1))


def test_float32_bytes_are_read_back_bit_for_bit() -> None:
    # arithmetic, not a view to another dtype, so that torch.jit.trace and ONNX take it
    raw = torch.randint(0, 256, (4000, 64), generator=torch.Generator().manual_seed(0))
    raw = raw.to(torch.uint8)
    values = torch.cat([raw.view(torch.float32).reshape(-1), torch.tensor([0.0, -0.0, 1e-45])])
    got = float32_from_bytes(values.view(torch.uint8).view(1, -1)).view(-1)
    finite = torch.isfinite(values)
    assert torch.equal(got[finite].view(torch.int32), values[finite].view(torch.int32))
    assert torch.equal(torch.isnan(got), torch.isnan(values))
    assert torch.equal(got[torch.isinf(values)], values[torch.isinf(values)])
    with pytest.raises(ValueError, match="non-finite value in observation key 'pos'"):
        ObsSpec("X-v0", DICT).rows(
            {"pixels": np.zeros((1, 6, 5, 3), np.uint8), "pos": [[np.nan, 0]], "mode": [1]}, 1
        )


def test_dict_of_vectors_is_a_float_row() -> None:
    space = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.MultiBinary(3)})
    spec = ObsSpec("x", space)
    assert spec.kind == "dict-vector" and spec.obs_shape == (5,) and spec.default_network == "mlp"
    rows = spec.rows({"a": np.ones((2, 2)), "b": np.array([[1, 0, 1], [0, 0, 1]])}, 2)
    np.testing.assert_array_equal(rows, [[1, 1, 1, 0, 1], [1, 1, 0, 0, 1]])


def test_large_images_take_the_nature_cnn() -> None:
    assert ObsSpec("x", spaces.Box(0, 255, (84, 84, 4), np.uint8)).default_network == "nature-cnn"
    assert ObsSpec("x", IMAGE_HWC).default_network == "multi-input"
    big = ObsSpec("x", spaces.Dict({"cam": spaces.Box(0, 255, (40, 48, 3), np.uint8)}))
    assert MultiInputEncoder(big.obs_shape).out_features == 256  # nature-cnn's convolutions


# ---- actions ---------------------------------------------------------------------------------
def test_multi_discrete_is_a_product_of_categoricals() -> None:
    nvec = (3, 2, 4)
    logits = torch.randn(6, 9, generator=torch.Generator().manual_seed(0))
    actions, logp = D.multi_categorical_sample(logits, nvec)
    assert actions.shape == (6, 3) and actions.dtype == torch.int64
    assert ((actions >= 0) & (actions < torch.tensor(nvec))).all()
    logp2, ent = D.multi_categorical_logprob_entropy(logits, actions, nvec)
    parts = [torch.distributions.Categorical(logits=x) for x in logits.split(nvec, -1)]
    want_logp = sum(p.log_prob(actions[:, k]) for k, p in enumerate(parts))
    torch.testing.assert_close(logp, want_logp)
    torch.testing.assert_close(logp2, want_logp)
    torch.testing.assert_close(ent, sum(p.entropy() for p in parts))
    mode = D.multi_categorical_mode(logits, nvec)
    assert torch.equal(mode, torch.stack([x.argmax(-1) for x in logits.split(nvec, -1)], -1))


def test_multi_discrete_policy_acts_and_evaluates() -> None:
    space = ActionSpace("multi_discrete", nvec=(3, 2))
    policy = ActorCritic(4, space, PolicyConfig())
    assert not hasattr(policy, "log_std")
    obs = torch.randn(5, 4)
    actions, logp, _ = policy.act(obs)
    assert actions.shape == (5, 2)
    torch.testing.assert_close(policy.evaluate(obs, actions)[0], logp)
    assert policy.act_deterministic(obs).shape == (5, 2)
    assert torch.equal(policy.env_action(actions), actions)


def test_rollout_codec_carries_and_checks_each_component() -> None:
    T, N = 2, 3
    policy = ActorCritic(4, ActionSpace("multi_discrete", nvec=(3, 2)), PolicyConfig())
    codec = RolloutCodec.for_policy(policy, T, N)
    assert codec.act_numel == 2 and codec.num_actions == (3, 2)
    buffer = RolloutBuffer(T, N, 4, (2,), True, torch.device("cpu"))
    buffer.actions.copy_(torch.tensor([[[2, 1]] * N] * T))
    source = SimpleNamespace(
        buffer=buffer,
        obs=torch.zeros(N, 4),
        memory=policy.initial_memory(N),
        window=torch.full((WINDOW, 3), -1.0),
    )
    payload = codec.encode(source, torch.zeros(3, dtype=torch.float64))
    assert payload.numel() == codec.numel
    start = codec.offset("actions")
    assert codec.problem(payload) is None
    payload[start + 2 * 2 + 1] = 2.0  # row 2, component 1: only 0..1
    assert codec.problem(payload) == "component 1 of an action 2.0 outside 0..1"


# ---- training --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["image", "dict"])
def test_train_two_iterations(kind: str, tmp_path) -> None:
    name = f"tiny_{kind}"
    space = IMAGE_HWC if kind == "image" else DICT
    distrl.register_task(name, gym=lambda: TinyEnv(space), max_episode_steps=5, replace=True)
    assert distrl.make_config(name).policy.network == "multi-input"  # picked from the spaces
    env = make_env(distrl.make_config(name), "cpu")
    distrl.check_env(env)
    env.close()
    result = api_train(name, tmp_path / "run", num_envs=4)
    record = result.metrics
    assert record["iteration"] == 2 and record["env_steps"] == 64
    assert record["episode_return_mean"] is not None
    assert np.isfinite(record["loss/policy"]) and result.policy.obs_dtype == torch.uint8
    # the exported actor reads the Dict row's bytes as the policy does (parity-checked)
    exported = distrl.export(result.run_dir, "torchscript")
    assert exported.max_abs_diff == 0.0 and exported.metadata["input"]["dtype"] == "uint8"
    assert exported.metadata["output"]["nvec"] == [3, 2]


# ---- refusals --------------------------------------------------------------------------------
def test_refusals_name_the_space_and_the_fix() -> None:
    with pytest.raises(ValueError, match="observation key 'pair' of space Tuple.*flatten that key"):
        ObsSpec("X-v0", spaces.Dict({"pair": spaces.Tuple((spaces.Discrete(2),))}))
    with pytest.raises(ValueError, match=r"action space MultiDiscrete\(\[\[2 2\]\]\).*1-D shapes"):
        check_spaces_of(spaces.Box(-1, 1, (2,)), spaces.MultiDiscrete([[2, 2]]))
    layout = ObsSpec("x", DICT).obs_shape
    for network in ("mlp", "nature-cnn"):
        with pytest.raises(ValueError, match=f"several parts.*--policy.network {network} cannot"):
            ActorCritic(112, ActionSpace("discrete", n=2), PolicyConfig(network=network), layout)
    tiny = ObsSpec("x", spaces.Dict({"dot": spaces.Box(0, 255, (2, 2, 1), np.uint8)})).obs_shape
    with pytest.raises(ValueError, match="key 'dot' is an image of 2x2"):
        MultiInputEncoder(tiny)
    with pytest.raises(ValueError, match="multi-input takes Dict observations.*mlp"):
        MultiInputEncoder((7,))


def check_spaces_of(obs: spaces.Space, act: spaces.Space) -> None:
    gymnasium.register("distrl-test/Spaces-v0", entry_point=lambda: TinyEnv(obs, act))
    try:
        check_spaces("distrl-test/Spaces-v0")
    finally:
        del gymnasium.registry["distrl-test/Spaces-v0"]


def test_atari_without_ale_py_names_the_extra(monkeypatch) -> None:
    for key in [k for k in gymnasium.registry if k.startswith("ALE/")]:
        monkeypatch.delitem(gymnasium.registry, key)
    monkeypatch.setitem(sys.modules, "ale_py", None)  # import ale_py fails as if not installed
    with pytest.raises(ValueError) as info:
        resolve_env_id("ALE/Pong-v5")
    message = str(info.value)
    assert "ale-py is missing" in message and "'.[atari]'" in message
    assert "distrl train atari-pong" in message and "'.[envpool]'" in message
    assert "Did you mean" not in message
    with pytest.raises(ValueError, match=r"\[atari\]"):
        distrl.make_config("gym:ALE/Breakout-v5")


def test_missing_box2d_and_mujoco_name_their_extras() -> None:
    error = gymnasium.error.DependencyNotInstalled("Box2D is not installed")
    assert "gymnasium[box2d]" in _missing_dependency("LunarLander-v3", error)
    error = gymnasium.error.DependencyNotInstalled("No module named 'mujoco'")
    assert "'.[mujoco]'" in _missing_dependency("Ant-v5", error)
    try:
        import Box2D  # noqa: F401
    except ImportError:  # the real refusal, where Box2D is missing (it is not a distrl extra)
        with pytest.raises(ValueError, match=r"LunarLander-v3 needs.*gymnasium\[box2d\]"):
            check_spaces("LunarLander-v3")


def test_ale_through_the_adapter_picks_the_nature_cnn() -> None:
    pytest.importorskip("ale_py")
    cfg = distrl.make_config("gym:ALE/Pong-v5")
    assert cfg.policy.network == "nature-cnn"
