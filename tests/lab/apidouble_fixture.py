"""Pytest fixtures that run the Kubernetes API double as a real child process.

Import the fixtures into a test module (there is deliberately no tests/lab/conftest.py):

    from apidouble_fixture import api_double, api_double_factory, kubectl  # noqa: F401

``api_double_factory(seed=..., args=[...])`` starts ``python -m kubegpu_lab.apidouble`` on a
free loopback port with its state in the test's tmp dir and returns an ``ApiDoubleProcess``
(``.kubeconfig``, ``.url``, ``.client`` for /_double, ``.stop()``, ``.kill()``). Every double
a test started is stopped afterwards and must have exited.
"""
import os
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(REPO, "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from kubegpu_lab.apidouble.control import ApiDoubleProcess  # noqa: E402

KUBECTL = os.environ.get("KUBECTL", "kubectl")


def write_seed(path, docs):
    """Write manifests (list of dicts or a YAML string) as a multi-document seed file."""
    with open(path, "w") as fh:
        if isinstance(docs, str):
            fh.write(docs)
        else:
            yaml.safe_dump_all(list(docs), fh, sort_keys=False)
    return path


@pytest.fixture
def api_double_factory(tmp_path):
    started = []

    def start(seed=None, args=(), name=None, port=0):
        state = tmp_path / (name or "apidouble%d" % len(started))
        state.mkdir(exist_ok=True)
        seeds = []
        if seed is not None:
            seeds.append(write_seed(str(state) + ".seed.yaml", seed))
        proc = ApiDoubleProcess(str(state), port=port, seeds=seeds, extra_args=list(args))
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()
        assert not proc.running(), "API double pid %s still running" % proc.pid


@pytest.fixture
def api_double(api_double_factory):
    return api_double_factory()


class Kubectl(object):
    """Runs the real kubectl against one double with a private discovery cache."""

    def __init__(self, kubeconfig, cache_dir):
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir

    def __call__(self, *args, **kwargs):
        timeout = kwargs.pop("timeout", 120)
        check = kwargs.pop("check", True)
        cmd = [KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", self.cache_dir] + list(args)
        env = dict(os.environ)
        env.pop("KUBECONFIG", None)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout, env=env, check=False)
        if check and proc.returncode != 0:
            raise AssertionError("%s failed (rc=%s)\nstdout:\n%s\nstderr:\n%s"
                                 % (" ".join(cmd), proc.returncode, proc.stdout, proc.stderr))
        return proc


@pytest.fixture
def kubectl(tmp_path):
    """kubectl(proc) -> a Kubectl bound to that double."""
    if shutil.which(KUBECTL) is None:
        pytest.skip("kubectl is not installed (set KUBECTL=/path/to/kubectl)")
    cache = tmp_path / "kubectl-cache"
    return lambda proc: Kubectl(proc.kubeconfig, str(cache))
