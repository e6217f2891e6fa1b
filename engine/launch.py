"""The ``engine`` console script: ``engine run`` goes to the workspace's daemon, everything else
(and every fallback) to the typer app in :mod:`engine.cli`.

This module and :mod:`engine.daemon.client` are all an ``engine run`` through the daemon imports
(standard library only), so a call costs the interpreter's start, not the engine's imports.
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["run"] and _daemon_wanted(args[1:]):
        from .daemon.client import run

        try:
            code = run(args[1:])
        except KeyboardInterrupt:  # Ctrl-C while waiting: the daemon finishes (and receipts) the call alone
            sys.exit(130)
        if code is not None:
            sys.exit(code)
    from .cli import main as cli_main

    cli_main()


def _daemon_wanted(args: list[str]) -> bool:
    from .daemon import disabled

    return not disabled() and "--no-daemon" not in args and "--help" not in args


if __name__ == "__main__":
    main()
