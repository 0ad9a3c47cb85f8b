"""Population-based training: the decisions (``distrl/pbt.py``) as pure functions, then
``distrl train <task> --population N`` through the command line: generations of member runs, the
copy of a member's checkpoint, the new hyperparameters in the copied member's run, a lost member
replaced, the csv, plot and TensorBoard files, refused settings and the resume."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from distrl import pbt
from distrl.args import parse_train_args
from distrl.population import take_flags
from distrl.sweep import Param
from tests.helpers import run_main, tiny_train_args

pytestmark = pytest.mark.timeout(240)

LR = Param("agent.learning_rate", "float", 1e-4, 1e-2, log=True)
GAMMA = Param("agent.gamma", "float", 0.95, 0.999)
EPOCHS = Param("agent.num_epochs", "int", 1, 8)
MINI = Param("agent.num_minibatches", "categorical", choices=(1, 2, 4))


# ---- the decisions ---------------------------------------------------------------------------


def test_the_worst_fraction_copies_one_of_the_best():
    rng = random.Random(0)
    copies = pbt.exploit([5.0, 1.0, 9.0, 7.0, 3.0, 8.0, 2.0, 6.0], 0.25, rng)
    assert sorted(c.member for c in copies) == [1, 6]  # the two worst of eight
    assert all(c.donor in (2, 5) for c in copies)  # each copies one of the two best
    assert pbt.exploit([1.0, 2.0], 0.25, rng) == [pbt.Copy(0, 1)]  # at least one, of two
    assert pbt.exploit([1.0], 0.25, rng) == []
    # at most half: a fraction of 0.5 over five members moves two
    assert len(pbt.exploit([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, rng)) == 2


def test_a_member_without_a_score_is_replaced_first():
    copies = pbt.exploit([3.0, None, 1.0, 2.0], 0.25, random.Random(1))
    assert {c.member for c in copies} == {1, 2}  # the lost one, and the worst scored one
    assert all(c.donor in (0, 3) for c in copies)
    assert pbt.exploit([None, None], 0.25, random.Random(1)) == []  # no one to copy


def test_explore_stays_in_range_and_moves_each_kind():
    rng = random.Random(0)
    assert pbt.perturb(LR, 1e-3, 1.2, rng) == pytest.approx(1.2e-3)
    assert pbt.perturb(LR, 1e-2, 1.2, rng) == 1e-2  # kept inside the range
    # a discount moves through its horizon: 1 - (1 - 0.99) * 1.2
    assert pbt.horizon_like(GAMMA) and not pbt.horizon_like(LR)
    assert pbt.perturb(GAMMA, 0.99, 1.2, rng) == pytest.approx(0.988)
    assert pbt.perturb(GAMMA, 0.99, 0.8, rng) == pytest.approx(0.992)
    assert pbt.perturb(EPOCHS, 2, 1.2, rng) == 3  # an integer moves by at least one
    assert pbt.perturb(EPOCHS, 1, 0.8, rng) == 1  # but not below its range
    assert pbt.perturb(MINI, 2, 1.2, rng) == 4 and pbt.perturb(MINI, 2, 0.8, rng) == 1
    for seed in range(50):
        start = {LR.name: 1e-3, GAMMA.name: 0.99, EPOCHS.name: 4, MINI.name: 2}
        values = pbt.explore([LR, GAMMA, EPOCHS, MINI], start, 0.25, 0.2, random.Random(seed))
        assert 1e-4 <= values[LR.name] <= 1e-2 and 0.95 <= values[GAMMA.name] <= 0.999
        assert 1 <= values[EPOCHS.name] <= 8 and values[MINI.name] in (1, 2, 4)


def test_the_winning_lineage_is_followed_back():
    # generation 0: everyone from itself; at its end 1 copies 0; at the end of 1, 0 copies 1
    parents = [[0, 1, 2], [0, 0, 2], [1, 1, 2]]
    assert pbt.lineage(parents, 0) == [0, 1, 0]  # 0 trained on 1's state, 1 on 0's
    assert pbt.lineage(parents, 2) == [2, 2, 2]


def test_a_shape_cannot_change_within_a_population():
    with pytest.raises(ValueError, match="policy.hidden_sizes cannot change"):
        pbt.check_space([Param("policy.hidden_sizes", "categorical", choices=((64,), (32,)))])
    with pytest.raises(ValueError, match="env.num_envs"):
        pbt.check_space([Param("env.num_envs", "int", 4, 8)])


def test_the_flags_are_taken_out_of_the_train_overrides():
    own, rest = take_flags(["cartpole", "--population", "3", "--pbt.interval=100", "--seed", "2"])
    assert own == ["--population", "3", "--pbt.interval=100"]
    assert rest == ["cartpole", "--seed", "2"]
    assert take_flags(["cartpole", "--seed", "2"]) == (None, ["cartpole", "--seed", "2"])
    with pytest.raises(ValueError, match="need --population"):
        take_flags(["cartpole", "--pbt.interval", "100"])


# ---- through the command line ----------------------------------------------------------------

# 4 envs x 16 steps: 64 env steps an iteration; --pbt.interval 128: generations of 2 iterations
TINY = ["--pbt.interval", "128", "--pbt.last", "1", "--agent.max-iterations", "4",
        *tiny_train_args(4, 16), "--agent.lr-schedule", "constant"]  # fmt: skip


def rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "pbt.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("bad, says", [
    (["--population", "1"], "at least 2 members"),
    (["--population", "2", "--pbt.fraction", "0.7"], "--pbt.fraction 0.7"),
    (["--population", "2", "--resume", "runs/x/ckpt_00000001.pt"], "resumes as a whole"),
    (["--population", "2", "--pbt.space", "{space}"], "cannot change within a population"),
])  # fmt: skip
def test_bad_settings_are_refused_before_anything_runs(bad, says, capsys, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("env.num_envs: {type: int, low: 2, high: 8}\n")
    bad = [w.format(space=space) for w in bad]
    code, _, err = run_main(["train", "cartpole", *bad, "--run-dir", str(tmp_path / "p")], capsys)
    assert code == 2 and says in err, err
    assert not (tmp_path / "p" / "member_0").exists()


def test_a_population_trains_copies_explores_and_resumes(capsys, tmp_path):
    run_dir = tmp_path / "pop"
    argv = ["train", "cartpole", "--population", "2", *TINY, "--run-dir", str(run_dir)]
    # member 1 cannot write its metrics: its run fails, and it is replaced by a copy of member 0
    (run_dir / "member_1" / "metrics.jsonl").mkdir(parents=True)
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    table = rows(run_dir)
    assert [(r["generation"], r["member"]) for r in table] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ]
    assert table[1]["lost"].startswith("exit code") and table[1]["score"] == ""
    assert float(table[0]["score"]) > 0
    assert table[3]["started_from"] == "0"  # member 1's second generation began from member 0's
    assert "member 1 (lost: exit code" in out and "copies member 0" in out
    # the copy is member 0's checkpoint of iteration 2, bit for bit
    copied = run_dir / "member_1" / "checkpoints" / "ckpt_00000002.pt"
    assert copied.read_bytes() == (run_dir / "member_0" / "checkpoints" / copied.name).read_bytes()
    # member 0 keeps the task's defaults
    default = parse_train_args(["cartpole"]).agent.learning_rate
    assert float(table[0]["agent.learning_rate"]) == pytest.approx(default)
    state = json.loads((run_dir / "population.json").read_text())
    assert state["generation"] == 2 and state["parents"] == [[0, 1], [0, 0]]
    assert "best: member 0" in out and (run_dir / "pbt.png").stat().st_size > 0
    assert (run_dir / "population.yaml").is_file()

    # the same command again: refused without --resume; with it, nothing is left to train
    code, _, err = run_main(argv, capsys)
    assert code == 2 and "holds a population already" in err
    code, out, err = run_main([*argv, "--resume", "auto"], capsys)
    assert code == 0 and "best: member 0" in out, err
    # another command over the same directory is refused, naming the one it was started with
    code, _, err = run_main([*argv, "--seed", "5", "--resume", "auto"], capsys)
    assert code == 2 and "started with other settings" in err
    # a damaged state file is named in one line, never trusted
    (run_dir / "population.json").write_text('{"generation": "two", "members": 7}')
    code, _, err = run_main([*argv, "--resume", "auto"], capsys)
    assert code == 2 and "population.json: not a distrl population's state" in err, err


def test_the_copied_member_steps_with_its_new_learning_rate(capsys, tmp_path):
    run_dir = tmp_path / "pop"
    argv = ["train", "cartpole", "--population", "2", *TINY, "--run-dir", str(run_dir),
            "--pbt.space", str(tmp_path / "lr.yaml"), "--pbt.resample", "0"]  # fmt: skip
    (tmp_path / "lr.yaml").write_text("agent.learning_rate: {type: float, low: 1e-5, high: 1e-2}\n")
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    table = rows(run_dir)
    copier = int(next(r["member"] for r in table[2:] if r["member"] != r["started_from"]))
    donor = 1 - copier
    new_lr = float(table[2 + copier]["agent.learning_rate"])
    assert new_lr == pytest.approx(float(table[donor]["agent.learning_rate"]) * 1.2) or (
        new_lr == pytest.approx(float(table[donor]["agent.learning_rate"]) * 0.8)
    )
    records = [json.loads(line) for line in (run_dir / f"member_{copier}" / "metrics.jsonl")
               .read_text().splitlines()]  # fmt: skip
    assert [r["iteration"] for r in records][-2:] == [3, 4]
    assert records[-1]["lr"] == pytest.approx(new_lr)  # the rate given anew is the one that steps
    log = (run_dir / f"member_{copier}" / "log.txt").read_text()
    assert "the learning rate restarts from it" in log
