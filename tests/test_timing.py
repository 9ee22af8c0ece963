"""Chapter times are a benchmark: reported and recorded every run, failing only on a
gross regression of one chapter against the others.

Runs in the same pytest session as nbval (see Makefile), which measures every chapter as
it executes it, kernel start included. Each chapter has a budget in wall seconds on the
2-core machine with 8 simulated devices. Over budget is reported; the test fails only
when a chapter takes more than GROSS times its budget both in wall seconds and in its
kernel's CPU seconds, and also more than RELATIVE times the median kernel CPU seconds of
the chapters of the same run. A busy machine stretches wall time, and CPU time
too, less (threads that wait for a core): CI's strict pass of 2026-11-29, at load
33, charged chapter 7 with 92 CPU seconds, over 3x its budget, and the rule before
this one failed the run on it, while the median chapter of that run took 47. A busy
machine stretches every chapter of a run; a regression of one chapter stands out
against the rest."""

import statistics

import pytest

# seconds per chapter on the 2-core machine with 8 simulated devices
DEFAULT_BUDGET = 30
# Chapter 8 starts 2-4 worker processes, each importing JAX.
BUDGETS = {"08_multihost": 60}
# Over this many times its budget (wall and CPU) a chapter is a candidate regression.
GROSS = 3
# ...and fails if its CPU seconds are also this many times the run's median chapter's.
RELATIVE = 3
# The median needs a run of several chapters; with fewer, nothing fails on time.
MIN_CHAPTERS = 4


def budget_for(name: str) -> int:
    return BUDGETS.get(name, DEFAULT_BUDGET)


def median_cpu(cpu: dict) -> float | None:
    """The run's median chapter CPU seconds (None for a run of too few chapters)."""
    known = [s for s in cpu.values() if s is not None]
    return statistics.median(known) if len(known) >= MIN_CHAPTERS else None


def grossly_over(
    name: str, wall: float, cpu: float | None, median: float | None
) -> bool:
    limit = GROSS * budget_for(name)
    if median is None or wall <= limit:
        return False
    return cpu is None or (cpu > limit and cpu > RELATIVE * median)


def verdict(name: str, wall: float, cpu: float | None, median: float | None) -> str:
    if grossly_over(name, wall, cpu, median):
        return f"REGRESSION (> {GROSS}x budget, > {RELATIVE}x the median chapter)"
    return "over budget" if wall > budget_for(name) else "ok"


def test_no_chapter_grossly_over_budget(request):
    seconds = getattr(request.config, "notebook_seconds", {})
    if not seconds:
        pytest.skip(
            "no notebook ran in this session: "
            "run with --nbval notebooks/ (as `make test` does)"
        )
    cpu = request.config.notebook_cpu_seconds
    median = median_cpu(cpu)
    slow = {
        name: (round(s, 1), cpu.get(name))
        for name, s in seconds.items()
        if grossly_over(name, s, cpu.get(name), median)
    }
    assert not slow, (
        f"chapters over {GROSS}x their budget and {RELATIVE}x the run's median "
        f"chapter ({median} CPU seconds), in (wall, kernel CPU) seconds: {slow}"
    )


@pytest.mark.parametrize(
    "wall, cpu, median, expected",
    [
        (25, 30, 30, "ok"),
        (45, 40, 30, "over budget"),
        (75, 40, 30, "over budget"),  # busy machine: wall only
        (95, 70, 30, "over budget"),  # CPU under 3x the budget
        (163, 92, 50, "over budget"),  # CI 2026-11-29: a busy machine
        (95, 91, 30, "REGRESSION (> 3x budget, > 3x the median chapter)"),
        (95, None, 30, "REGRESSION (> 3x budget, > 3x the median chapter)"),
        (95, 91, None, "over budget"),  # too few chapters to judge
    ],
)
def test_verdicts(wall, cpu, median, expected):
    assert verdict("01_pmap", wall, cpu, median) == expected


def test_median_needs_several_chapters():
    assert median_cpu({"a": 10.0, "b": 20.0, "c": None}) is None
    assert median_cpu({"a": 10.0, "b": 20.0, "c": 30.0, "d": 90.0}) == 25.0
