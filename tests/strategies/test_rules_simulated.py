"""Every update rule on hand-computed cases, through the in-process simulator."""

from __future__ import annotations

import pytest

import lsgd
from tests import scenarios
from tests.cases import CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule(name: str) -> None:
    world, groups, fn, spec, check = CASES[name]
    results = lsgd.simulate(getattr(scenarios, fn), world, groups, args=(spec,), seed=0)
    check(results)
