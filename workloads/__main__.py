"""``python -m workloads`` runs the ``vmworkload`` command line."""

import sys

from workloads.cli import main

sys.exit(main())
