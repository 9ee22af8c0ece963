"""The end of `make test`: each phase's wall seconds (tests/phase.sh recorded them in
_build/phases.txt) and the total, printed and appended to bench/chapter-times.jsonl
beside the chapter times, so the next slowdown shows at once."""

import datetime
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the helpers module asks JAX
    from tests.helpers import cpu_model

    phases = {}
    for line in (ROOT / "_build" / "phases.txt").read_text().splitlines():
        name, ms = line.rsplit(" ", 1)
        phases[name] = round(int(ms) / 1000, 1)
    total = round(sum(phases.values()), 1)
    width = max(map(len, phases))
    print(f"make test phases in wall seconds ({cpu_model()}, {os.cpu_count()} cores):")
    for name, seconds in phases.items():
        print(f"  {name:<{width}}  {seconds:7.1f}")
    print(f"  {'total':<{width}}  {total:7.1f}")
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
