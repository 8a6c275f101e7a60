"""``python -m layersched.cli``: the same as the ``layersched`` command."""

import sys

from layersched.cli.main import main

sys.exit(main())
