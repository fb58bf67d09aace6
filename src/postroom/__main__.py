"""``python -m postroom`` and the ``postroom`` command.

Ctrl-C at any moment ends the program with one word and status 130, never a traceback — also
in the second or two while the modules load, which is why the import sits inside the ``try``.
"""

from __future__ import annotations

import sys


def run() -> None:
    try:
        from postroom.cli.main import main

        main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    run()
