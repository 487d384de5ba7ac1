"""`python -m laya_edge`: the command line (see laya_edge.cli)."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
