"""``python -m floatlab``: the floatlab command line."""

import sys

from floatlab.cli import main

if __name__ == "__main__":
    sys.exit(main())
