"""What a check script needs from Python, said all at once.

A check script calls `needs(tool, modules)` before importing them: when any is missing it
names every missing module (not only the first import that failed), the Python that lacks
them, and the pip command that installs them, on stderr, and exits with status 3, which the
Rust tests read as "skip loudly" (`SKIPPED-<TOOL> …`, or a failure under `REQUIRE_<TOOL>=1`).
"""
import importlib.util
import sys


def needs(tool, modules, pip=None):
    """Exit 3 unless every module of `modules` (top-level names) can be imported."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"{tool} unavailable: {sys.executable} (Python {sys.version.split()[0]}) lacks "
            f"{', '.join(missing)} (pip install {pip or ' '.join(missing)})",
            file=sys.stderr,
        )
        sys.exit(3)
