"""Stand-in for ansible-test's pip bootstrap script (get-pip-<version>.py).

ansible-test bootstraps pip into the virtualenvs it creates for some sanity tests by running
a get-pip script it downloads from ci-files.testing.ansible.com. That host is not reachable
from our CI, so `make sanity` places this file in ansible-test's cache instead, next to the
official pip wheel downloaded from PyPI. It does what get-pip.py does: put the pip wheel on
sys.path and run `pip install` from it with the arguments ansible-test passes
(e.g. `--disable-pip-version-check pip==24.2 --no-setuptools --no-wheel`).
"""
import glob
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    wheels = sorted(glob.glob(os.path.join(here, "pip-*-py3-none-any.whl")))
    if not wheels:
        sys.stderr.write("no pip wheel beside %s; run `make sanity` to fetch it\n" % __file__)
        return 1
    wanted = [a.split("==", 1)[1] for a in sys.argv[1:] if a.startswith("pip==")]
    if wanted:
        exact = [w for w in wheels if os.path.basename(w).startswith("pip-%s-" % wanted[0])]
        wheels = exact or wheels
    wheel = wheels[-1]
    sys.path.insert(0, wheel)
    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel

    args = ["install", "--upgrade", "--force-reinstall", "--no-index", "--find-links", here]
    args += [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    return pip_main(args)


if __name__ == "__main__":
    sys.exit(main())
