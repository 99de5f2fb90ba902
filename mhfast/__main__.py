"""``python3 -m mhfast ...`` runs the command line (:mod:`mhfast.cli`)."""
import sys

from .cli import main

sys.exit(main())
