"""Fixtures of the engine's tests: a spy on which path each call takes."""
import sys

import pytest

from pyrope._engine import plan as _plan

ROPE_MODULE = sys.modules["pyrope.rope"]


class Paths:
    """Counts what calls did: ``general``, a ``Job`` was made (the general path);
    ``planned``, a plan was made (``direct_call`` on a memo miss, or
    ``plan_direct`` called on its own, as ``Rope.prepare`` does; the plan
    ``direct_call`` makes counts once). The memo starts empty."""

    def __init__(self, monkeypatch):
        self.general = self.planned = 0
        paths, job = self, ROPE_MODULE.Job
        direct_call, plan_direct = _plan.direct_call, _plan.plan_direct
        inside = []   # direct_call running: its own plan_direct is not counted again

        class CountedJob(job):
            def __init__(self, *args, **kwargs):
                paths.general += 1
                super().__init__(*args, **kwargs)

        def counted_direct_call(*args, **kwargs):
            paths.planned += 1
            inside.append(True)
            try:
                return direct_call(*args, **kwargs)
            finally:
                inside.pop()

        def counted_plan_direct(*args, **kwargs):
            if not inside:
                paths.planned += 1
            return plan_direct(*args, **kwargs)

        monkeypatch.setattr(ROPE_MODULE, "Job", CountedJob)
        monkeypatch.setattr(_plan, "direct_call", counted_direct_call)
        monkeypatch.setattr(_plan, "plan_direct", counted_plan_direct)
        monkeypatch.setattr(_plan, "CALLS", {})

    def direct(self, fn, *args, **kwargs):
        """``fn(...)``, asserting it took the direct path (no general path)."""
        before = self.general
        got = fn(*args, **kwargs)
        assert self.general == before, "took the general path"
        return got

    def general_path(self, fn, *args, **kwargs):
        """``fn(...)``, asserting it took the general path."""
        before = self.general
        got = fn(*args, **kwargs)
        assert self.general == before + 1, "did not take the general path"
        return got


@pytest.fixture
def paths(monkeypatch):
    """A :class:`Paths` spy for the test."""
    return Paths(monkeypatch)
