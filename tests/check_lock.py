"""Does .venv hold exactly the lock? `make` runs this after installing: a package
installed by hand (jax[cuda13] as the README's accelerator section says, or an upgrade)
changes what the chapters run and print. Prints each difference and how to return to
the lock; exits 1 on any difference when asked to be --strict (make test), 0 otherwise
(make book warns)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ("requirements.txt", "requirements-compilers.txt", "requirements-installer.txt")


def pins(lines) -> dict:
    """name -> version of every `name==version` line, names normalised as pip does."""
    found = {}
    for line in lines:
        if m := re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip()):
            found[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
    return found


def main(strict: bool) -> int:
    locked = {}
    for name in LOCKS:
        locked |= pins((ROOT / name).read_text().splitlines())
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    installed = {k: v for k, v in pins(freeze).items() if k != "pip"}
    differ = [
        f"{name}: locked {locked.get(name, '(not locked)')}, "
        f"installed {installed.get(name, '(missing)')}"
        for name in sorted(set(locked) | set(installed))
        if locked.get(name) != installed.get(name)
    ]
    if not differ:
        return 0
    print(".venv differs from the lock (requirements*.txt):", *differ[:20], sep="\n  ")
    print("Return to the lock with: rm -rf .venv && make venv")
    return 1 if strict else 0


if __name__ == "__main__":
    sys.exit(main("--strict" in sys.argv))
