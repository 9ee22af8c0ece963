"""The end of `make test`: each phase's wall seconds (tests/phase.sh recorded when each
started and ended in _build/phases.txt; some run side by side) and the total since the
lint began (_build/test-started), printed and appended to bench/chapter-times.jsonl
beside the chapter times, so the next slowdown shows at once."""

import datetime
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the helpers module asks JAX
    from tests.helpers import cpu_model

    started = float((ROOT / "_build" / "test-started").read_text())
    phases, spans = {}, {}
    for line in (ROOT / "_build" / "phases.txt").read_text().splitlines():
        name, start, end = line.split("\t")
        phases[name] = round((int(end) - int(start)) / 1000, 1)
        spans[name] = (int(start) / 1000 - started, int(end) / 1000 - started)
    total = round(max(end for _, end in spans.values()), 1)
    width = max(map(len, phases))
    print(f"make test phases in wall seconds ({cpu_model()}, {os.cpu_count()} cores;")
    print("  from..to: seconds since make test began, .venv set up; phases overlap):")
    for name, seconds in phases.items():
        start, end = spans[name]
        print(f"  {name:<{width}}  {seconds:7.1f}  {start:6.0f}..{end:.0f}")
    print(f"  {'total, lint included':<{width}}  {total:7.1f}")
    with (ROOT / "bench" / "chapter-times.jsonl").open("a") as record:
        entry = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "run": "make test",
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "phases": phases,
            "total": total,
        }
        record.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    main()
