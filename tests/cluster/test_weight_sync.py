"""`distrl bench cluster`'s weight sync from several senders to several receivers, each rank on
its own node of the namespace testbed, shrunk: 2 learners, 4 actors, 1M parameters on a fast
link. Every actor checks every byte it received after each method (``has_pattern``) and a rank
that finds one wrong fails the run, so rows back mean every actor got the exact model."""

from __future__ import annotations

import pytest

from benchmarks.cluster import ClusterArgs, weight_sync
from tests.cluster import testbed

WHY = testbed.missing()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no namespace testbed: {WHY}")


@pytest.mark.long  # 6 nodes, every method with 1 and 2 senders: ~10 s
@pytest.mark.timeout(200)
def test_two_learners_push_the_exact_model_to_four_actors():
    args = ClusterArgs(
        rates="",
        broadcast_params="1000000",
        broadcast_learners="1,2",
        broadcast_actors="4",
        broadcast_rate=10_000,
        repeats=1,
        warmup=0,
        timeout=150,
    )
    rows = weight_sync(args)
    got = {(r["method"], r["senders"]) for r in rows}
    assert got == {("routing", 1), ("routing", 2), ("naive", 1), ("broadcast", 1), ("p2p", 1)}
    assert all(r["A"] == 4 and r["L"] == 2 and r["bytes"] == 4_000_000 for r in rows)
    assert all(r["time_median_s"] > 0 and r["link_bound_s"] > 0 for r in rows)
    two = next(r for r in rows if r["method"] == "routing" and r["senders"] == 2)
    assert two["vs_one_sender"] is not None and two["makespan_over_lb"] <= 4 / 3 + 1e-9
