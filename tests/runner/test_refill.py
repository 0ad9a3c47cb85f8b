"""``--multitask.refill-rounds``: the groups whose K outcomes were all equal make way for groups
of the task's next init states (RIPT's refill), so the update trains on more kept groups; the
replaced episodes still count in the task's success; a resumed run repeats the refills. And
``--multitask.smart-init-states``: the states whose group came out all equal sit out a while."""

from __future__ import annotations

import pytest
import torch

from distrl.args import parse_train_args
from distrl.storage.episodes import EpisodeBatch, replace_groups
from distrl.telemetry import read_metrics
from tests.helpers import QUIET, api_train, assert_same, final_state

AGENT = {"max_iterations": 4, "num_epochs": 1, "save_interval": 2}
MULTITASK = {"tasks": ("reach-east", "reach-west"), "group_size": 4, "data_batch_size": 16}


def batch(E: int, K: int, fill: float) -> EpisodeBatch:
    return EpisodeBatch(
        obs=torch.full((E, 3, 2), fill), actions=torch.full((E, 3, 1), fill),
        logprobs=torch.full((E, 3), fill), rewards=torch.full((E, 3), fill),
        lengths=torch.full((E,), 3), success=torch.full((E,), bool(fill)),
        init_indices=torch.full((E,), int(fill)), group_size=K, env_steps=10,
    )  # fmt: skip


def test_replace_groups_puts_the_new_groups_in_place():
    b = batch(8, 2, 0.0)
    replace_groups(b, torch.tensor([1, 3]), batch(4, 2, 1.0))
    assert b.success.tolist() == [False, False, True, True, False, False, True, True]
    assert b.obs[2:4].eq(1).all() and b.obs[:2].eq(0).all() and b.env_steps == 20
    with pytest.raises(ValueError, match="do not refill"):
        replace_groups(b, torch.tensor([0]), batch(4, 2, 1.0))


def test_refills_keep_more_groups_and_count_every_episode(tmp_path):
    runs = {}
    for name, rounds in (("plain", 0), ("refill", 3)):
        api_train("reach10", tmp_path / name, num_envs=8, agent=AGENT, seed=1,
                  multitask={**MULTITASK, "refill_rounds": rounds})  # fmt: skip
        runs[name] = read_metrics(tmp_path / name / "metrics.jsonl")
    plain, refill = runs["plain"], runs["refill"]
    assert sum(r["rloo/refilled_groups"] for r in refill) > 0
    assert all(r["rloo/refilled_groups"] == 0 for r in plain)
    assert sum(r["rloo/kept_episodes"] for r in refill) > sum(
        r["rloo/kept_episodes"] for r in plain
    )
    for r in refill:  # every collected episode counts, the replaced ones too
        episodes = sum(v for k, v in r.items() if k.endswith("/episodes"))
        assert episodes == 16 + 4 * r["rloo/refilled_groups"]
    assert refill[-1]["env_steps"] > plain[-1]["env_steps"]


def resumed_equals_whole(tmp_path, num_envs: int, mt: dict) -> dict:
    """Train 4 iterations whole, and 2 then resumed to 4; assert the two end bit for bit and
    return the whole run's final state."""
    api_train("reach10", tmp_path / "full", num_envs=num_envs, agent=AGENT, multitask=mt, seed=1)
    api_train("reach10", tmp_path / "part", num_envs=num_envs, agent={**AGENT, "stop_at": 2},
              multitask=mt, seed=1)  # fmt: skip
    api_train("reach10", tmp_path / "part", num_envs=num_envs, agent=AGENT, multitask=mt, seed=1,
              resume="auto")  # fmt: skip
    full = final_state(tmp_path / "full", 4)
    assert_same(full, final_state(tmp_path / "part", 4))
    return full


def test_a_resumed_run_with_refills_ends_bit_for_bit(tmp_path):
    resumed_equals_whole(tmp_path, 8, {**MULTITASK, "refill_rounds": 2})


def test_refills_without_dynamic_sampling_are_refused(tmp_path):
    argv = ["reach10", "--multitask.refill-rounds", "2", "--multitask.drop-uniform", "False"]
    with pytest.raises(ValueError, match="refill-rounds replaces the groups"):
        parse_train_args([*argv, "--run-dir", str(tmp_path), *QUIET])


def test_smart_init_states_rest_the_uniform_ones_and_resume_bit_for_bit(tmp_path):
    """--multitask.smart-init-states: the init states whose group came out all equal sit out
    their task's next visits; the cursors' rest is in the rank state, so a resume repeats it."""
    # one task, 16 of its 50 init states a visit: the 4th visit wraps round to rested ones
    one = {"tasks": ("reach-east",), "group_size": 4, "data_batch_size": 64}
    full = resumed_equals_whole(tmp_path, 16, {**one, "smart_init_states": 3})
    api_train("reach10", tmp_path / "plain", num_envs=16, agent=AGENT, multitask=one, seed=1)
    plain = final_state(tmp_path / "plain", 4)
    smart = full["ranks"][0]["schedule"]["init_states"]
    walked = {t: c["position"] for t, c in plain["ranks"][0]["schedule"]["init_states"].items()}
    assert all("resting" in c for c in smart.values())
    assert {t: c["position"] for t, c in smart.items()} != walked  # the walk passed some by
