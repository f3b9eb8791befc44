"""``python -m kubegpu_lab.molecule_driver create|destroy`` (the driver's playbooks run it)."""
import sys

from . import main

sys.exit(main())
