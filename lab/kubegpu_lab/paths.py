"""Where the lab's files are, from a source checkout or from the installed ``kubegpu-lab`` wheel.

The lab is the package plus data directories: ``node/`` (what is installed into every node),
``packages/`` (the fake NVIDIA packages' scripts and version catalog), ``profiles/`` and
``fakes/nvml/`` (C sources of the fake NVML library and nvidia-smi, compiled with gcc on the
machine that boots the lab). In the repository they sit next to the package (``lab/node``, ...);
the wheel carries the same tree inside the package (``kubegpu_lab/data/node``, ...; see
lab/pyproject.toml). ``DATA_DIR`` is the one place every module reads them from.
"""
import os

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Put first on PYTHONPATH of the lab's own child processes (API double, node supervisors) so
# they import this very copy of the package.
IMPORT_ROOT = os.path.dirname(PACKAGE_DIR)
_INSTALLED_DATA = os.path.join(PACKAGE_DIR, "data")
DATA_DIR = _INSTALLED_DATA if os.path.isdir(_INSTALLED_DATA) else IMPORT_ROOT

NODE_KIT = os.path.join(DATA_DIR, "node")
PACKAGES_DIR = os.path.join(DATA_DIR, "packages")
PROFILE_DIR = os.path.join(DATA_DIR, "profiles")
NVML_SRC = os.path.join(DATA_DIR, "fakes", "nvml")
