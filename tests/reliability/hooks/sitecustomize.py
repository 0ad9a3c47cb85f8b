"""Test-only hook, imported at start-up by every Python process that has this directory on
PYTHONPATH (tests/reliability/test_elastic_restart.py puts it there for one `distrl train` run).

In a torchrun worker whose RANK is ``DISTRL_TEST_KILL_RANK``, the process SIGKILLs itself on
entering the update of iteration ``DISTRL_TEST_KILL_AT_ITERATION``, once: it first creates the
marker file ``DISTRL_TEST_KILL_MARKER``, and a restarted worker that finds it carries on. With
``DISTRL_TEST_KILL_AGENT=1`` it SIGKILLs its torchrun agent (its parent) first: the whole node
goes down, as when a machine dies (tests/cluster). Nothing in src/ knows about this; without the
variables the hook does nothing.
"""

import os

_AT = os.environ.get("DISTRL_TEST_KILL_AT_ITERATION")

if _AT is not None and "LOCAL_RANK" in os.environ:  # a torchrun worker, not the agent
    import signal

    from distrl.runner.hooks import HOOKS, Hooks

    _rank = int(os.environ.get("DISTRL_TEST_KILL_RANK", "1"))
    _marker = os.environ["DISTRL_TEST_KILL_MARKER"]
    _agent_too = os.environ.get("DISTRL_TEST_KILL_AGENT") == "1"

    class _KillOnce(Hooks):
        def before_update(self, runner) -> None:
            if runner.strategy.rank != _rank or runner.iteration != int(_AT):
                return
            try:
                fd = os.open(_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return  # died once already: this is the restarted worker
            os.write(fd, f"rank {_rank} killed at iteration {_AT}\n".encode())
            os.close(fd)
            if _agent_too:
                os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

    HOOKS.append(_KillOnce())
