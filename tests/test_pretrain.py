"""`distrl pretrain`: behaviour cloning from demonstrations fits the expert and writes a bc.pt
that `train <suite> --init-from` takes (and refuses when its policy settings differ); on 2 ranks
(tasks sharded, gradients all-reduced, under real torchrun) it clones what one process does."""

from __future__ import annotations

import pytest
import torch

from distrl import checkpoint as ckpt
from distrl import demos
from distrl.args import parse_train_args
from distrl.pretrain import PretrainArgs, pretrain
from distrl.rundir import init_policy
from tests.helpers import run_main

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "reach10-2.pt"
    return demos.save_demos(demos.make_demos("reach10", per_task=2), path)


def test_cloning_fits_the_expert_and_init_from_takes_it(demo_file, tmp_path, capsys):
    args = PretrainArgs("reach10", str(demo_file), str(tmp_path / "bc"), epochs=40, seed=1)
    path = pretrain(args, [])
    out = capsys.readouterr().out
    nll = [float(line.rsplit(" ", 1)[1]) for line in out.splitlines() if "likelihood" in line]
    assert nll[-1] < nll[0] - 0.3, nll
    state, manifest = ckpt.load_checkpoint(path)
    assert manifest["policy_only"] and path.name == "bc.pt"
    # the clone is evaluated on the held-out init states: every task, 50 episodes each
    assert "from held-out init states" in out and set(manifest["eval_per_task"]) == set(
        demos.load_demos(demo_file)["tasks"]
    )
    assert manifest["eval_success"] == pytest.approx(
        sum(manifest["eval_per_task"].values()) / len(manifest["eval_per_task"])
    )
    steps = sum(int(d["lengths"].sum()) for d in demos.load_demos(demo_file)["data"].values())
    assert float(state["policy"]["normalizer.count"]) == steps  # fitted to the demo steps
    # the expert's actions: the cloned mean is closer to them than a fresh policy's
    obs, actions, _ = demos.demo_steps(demos.load_demos(demo_file))
    from distrl.api import load_policy

    policy, _ = load_policy(path)
    with torch.no_grad():
        err = (policy.actor(policy.normalizer(obs)) - actions).pow(2).mean()
    assert float(err) < 0.5 * float(actions.pow(2).mean())

    got, at_path, _ = init_policy(parse_train_args(["reach10", "--init-from", str(path)]))
    assert at_path == path and got.keys() == state["policy"].keys()
    code, out, err = run_main(
        ["train", "reach10", "--init-from", str(path), "--run-dir", str(tmp_path / "ft"),
         "--agent.max-iterations", "1", "--threads", "1", "--progress", "False",
         "--tensorboard", "False"], capsys)  # fmt: skip
    assert code == 0 and "init: policy from" in out, err


def test_overrides_after_the_separator_shape_the_policy(demo_file, tmp_path, capsys):
    run = tmp_path / "bc"
    code, _, err = run_main(["pretrain", "reach10", "--demos", str(demo_file), "--run-dir",
                             str(run), "--epochs", "2", "--", "--policy.actor-hidden", "32", "32"],
                            capsys)  # fmt: skip
    assert code == 0, err
    bc = run / "checkpoints" / "bc.pt"
    assert ckpt.read_manifest(bc)["config"]["policy"]["actor_hidden"] == [32, 32]
    code, _, err = run_main(["train", "reach10", "--init-from", str(bc)], capsys)
    assert code == 2 and "--policy.actor-hidden (32, 32) there, (64, 64) here" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["cartpole", "--demos", "DEMOS"], "cartpole is not an episodic suite"),
        (["reach10", "--demos", "MISSING"], "no such file"),
        (["reach10", "--demos", "DEMOS", "--epochs", "0"], "--epochs must be at least 1"),
        (["reach10", "--demos", "DEMOS", "--nproc", "0"], "--nproc must be at least 1"),
        (["reach10", "--demos", "DEMOS", "--", "--dist.strategy", "ps-bsp"], "by all-reduce"),
    ],
)
def test_mistakes_are_named(demo_file, tmp_path, capsys, argv, message):
    words = {"DEMOS": str(demo_file), "MISSING": str(tmp_path / "none.pt")}
    argv = [words.get(w, w) for w in argv]
    code, _, err = run_main(["pretrain", *argv, "--run-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_two_ranks_clone_what_one_process_clones(demo_file, tmp_path, capsys):
    runs = {}
    for nproc in (1, 2):
        run = tmp_path / f"w{nproc}"
        argv = ["pretrain", "reach10", "--demos", str(demo_file), "--run-dir", str(run),
                "--epochs", "6", "--batch-size", "32", "--eval-episodes", "0",
                "--nproc", str(nproc), "--", "--threads", "1"]  # fmt: skip
        code, out, err = run_main(argv, capsys)
        assert code == 0, err
        runs[nproc] = ckpt.load_checkpoint(run / "checkpoints" / "bc.pt")
    (one, m1), (two, m2) = runs[1], runs[2]
    assert (m1["world_size"], m2["world_size"]) == (1, 2)
    assert m2["bc_loss"] == pytest.approx(m1["bc_loss"], rel=1e-5)
    for k, v in one["policy"].items():  # summation order is all that differs
        torch.testing.assert_close(two["policy"][k], v, rtol=1e-5, atol=1e-5, msg=k)
    obs, actions, _ = demos.demo_steps(demos.load_demos(demo_file))  # and it did learn
    from distrl.api import load_policy

    policy, _ = load_policy(tmp_path / "w2" / "checkpoints" / "bc.pt")
    with torch.no_grad():
        moved = float((policy.actor(policy.normalizer(obs)) - actions).pow(2).mean())
    assert moved < float(actions.pow(2).mean())
