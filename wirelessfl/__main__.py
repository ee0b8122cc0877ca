"""The ``wirelessfl`` command's entry (``python -m wirelessfl`` too), above the command line.

Ctrl-C while the command starts (PyTorch's import, ~2 s) exits 130 with one line, as it does
once :func:`wirelessfl.cli.main` runs.
"""

from __future__ import annotations

import sys

from wirelessfl.errors import end_process


def entry() -> None:
    """The installed ``wirelessfl`` script: :func:`console`, then :func:`end_process`."""
    end_process(console())


def console() -> int:
    """Run the command line; a Ctrl-C during its imports is one line and exit code 130."""
    try:
        from wirelessfl.cli import main
    except KeyboardInterrupt:
        print("\nwirelessfl: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    entry()
