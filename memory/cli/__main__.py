"""``python -m memory.cli``: the ``stratamem`` command."""

import sys

from memory.cli.app import main

sys.exit(main())
