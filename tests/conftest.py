"""Hypothesis profiles for the fuzz and property tests (``tests/test_fuzz_inputs.py``,
``tests/test_properties.py``).

Select one with ``HYPOTHESIS_PROFILE=<name>`` (default ``ci``):

- ``ci``: the budget the whole suite runs with in CI (under ~3 minutes on 2 cores); each test
  scales its example count from ``max_examples`` by its cost (cheap parsers run the full
  budget, searches a fraction of it); derandomized, so CI is reproducible;
- ``dev``: a quick smoke run while editing;
- ``fuzz``: a long local run (ten times the CI budget, random seeds) to hunt for new bugs.

Every test also bounds each call's wall time itself (see ``bounded`` in the test modules), so
a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

_COMMON = dict(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                           HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)

settings.register_profile("ci", max_examples=500, deadline=timedelta(seconds=10), derandomize=True, **_COMMON)
settings.register_profile("dev", max_examples=20, deadline=None, derandomize=True, **_COMMON)
settings.register_profile("fuzz", max_examples=2000, deadline=None, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
