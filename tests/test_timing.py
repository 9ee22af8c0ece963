"""Each chapter executes within its time limit. Runs in the same pytest session as nbval (see Makefile),
which measures every chapter as it executes it, kernel start included."""
import pytest

DEFAULT_LIMIT = 30          # seconds per chapter on the 2-core machine with 8 simulated devices
LIMITS = {"05_transformer": 60}   # chapter -> seconds, for the few allowed more


def limit_for(name: str) -> int:
    return LIMITS.get(name, DEFAULT_LIMIT)


def test_every_chapter_within_its_limit(request):
    seconds = getattr(request.config, "notebook_seconds", {})
    if not seconds:
        pytest.skip("no notebook ran in this session: run with --nbval notebooks/ (as `make test` does)")
    slow = {name: round(s, 1) for name, s in seconds.items() if s > limit_for(name)}
    assert not slow, f"chapters over their time limit (seconds): {slow}"
