"""``python -m layersched.run`` (and ``torchrun ... -m layersched.run``): the entry point of
`layersched.cli.run`, which holds the command."""

import sys

from layersched.cli.run import main

if __name__ == "__main__":
    sys.exit(main())
