"""``PYTHONPATH=lab python -m kubegpu_lab ...``: the GPU node lab command line (see cli.py)."""
import sys

from .cli import main

sys.exit(main())
