"""``python -m bridge``: see :mod:`bridge.kit.cli`."""

import sys

from bridge.kit.cli import main

if __name__ == "__main__":
    sys.exit(main())
