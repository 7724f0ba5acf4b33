"""Hypothesis settings profiles for arrow_gpu's property tests.

* ``quick``: the default, a first run on a laptop: few examples, the same every run.
* ``ci``: more examples, still deterministic, for every push.
* ``gpu``: more examples, with a deadline that allows for device latency.
* ``thorough``: a long hunt, for nightly or local runs.

All of them print the reproduction blob of a failure, so that a failure seen
in CI can be replayed locally with ``@reproduce_failure``.

Select one with the ``ARROW_GPU_HYPOTHESIS_PROFILE`` environment variable and
call :func:`load_profile` from a ``conftest.py``:

>>> from arrow_gpu.testing.profiles import load_profile
>>> load_profile() in PROFILES
True
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

__all__ = ["DEFAULT_PROFILE", "PROFILES", "PROFILE_ENV_VAR", "load_profile", "register_profiles"]

PROFILE_ENV_VAR = "ARROW_GPU_HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "quick"

PROFILES: dict[str, settings] = {
    # The same examples on every run: a push is judged by its code, not by the draw. New
    # examples come from gpu and thorough.
    "quick": settings(max_examples=20, deadline=None, derandomize=True, print_blob=True),
    "ci": settings(max_examples=50, deadline=None, derandomize=True, print_blob=True),
    # The first call on a device pays for context creation and module loading.
    "gpu": settings(
        max_examples=200,
        deadline=timedelta(seconds=2),
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    ),
    "thorough": settings(
        max_examples=10_000,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    ),
}
"""The settings of each profile, by name."""


def register_profiles() -> None:
    """Register every profile in :data:`PROFILES` with Hypothesis; idempotent."""
    for name, profile in PROFILES.items():
        settings.register_profile(name, profile)


def load_profile(name: str | None = None) -> str:
    """Register the profiles, load one and return its name.

    The profile is ``name`` if given, else the value of
    ``ARROW_GPU_HYPOTHESIS_PROFILE``, else ``quick``.  An unknown name raises
    ``hypothesis.errors.InvalidArgument``.
    """
    register_profiles()
    chosen = name or os.environ.get(PROFILE_ENV_VAR) or DEFAULT_PROFILE
    # Check first: Hypothesis records an unknown name as current before rejecting it.
    settings.get_profile(chosen)
    settings.load_profile(chosen)
    return chosen
