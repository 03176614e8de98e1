"""``python -m workloads`` runs the ``vmworkload`` command line."""

import sys

from vmsched.workloads.cli import main

sys.exit(main())
