# -*- coding: utf-8 -*-
"""The audit's probe registry (module_utils/audit/probes.py): every probe's skip rule, the parameter
chaining, the option specs shared with the single-probe modules, audit_node's options, the
evaluation input - and the registry run end to end on a node without GPU or kubelet."""
from __future__ import absolute_import, division, print_function

import os
import subprocess

import pytest
import yaml

from ansible_collections.kubegpu.fleet.plugins.module_utils.checkpoint import sync as checkpoint
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probes
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import ProbeFailed

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))))
BY_NAME = dict((p.name, p) for p in probes.REGISTRY)


def gpu(**nvidia):
    return {"changed": False, "ansible_facts": {"nvidia": nvidia}}


def test_registry_order_and_names():
    assert probes.NAMES == ("gpu_facts", "kubelet_facts", "driver_guard", "checkpoint_sync", "cgroup_devices",
                            "stack_facts")
    assert len(set(p.ctx_key for p in probes.REGISTRY)) == len(probes.REGISTRY)


# --------------------------------------------------------------------------- skip rules

def test_probes_without_a_skip_rule_always_run():
    for name in ("gpu_facts", "kubelet_facts", "driver_guard"):
        assert BY_NAME[name].skip({}) is None
        assert BY_NAME[name].skip({"gpu_facts": {"failed": True, "msg": "x"}}) is None


@pytest.mark.parametrize("probe, runs", [
    ({"status": "ok"}, True),
    ({"status": "ok", "errors": []}, True),
    ({"status": "ok", "errors": [{"call": "nvmlDeviceGetUUID", "error": "NVML_ERROR_GPU_IS_LOST"}]}, False),
    ({"status": "hung", "hung_in": "nvmlInit"}, False),
    ({"status": "absent"}, False),
    ({}, False),
])
def test_checkpoint_runs_only_on_a_clean_nvml_answer(probe, runs):
    reason = BY_NAME["checkpoint_sync"].skip({"gpu_facts": gpu(probe=probe, present=True)})
    assert (reason is None) == runs
    if not runs:
        assert "no trustworthy device list" in reason and str(probe.get("status")) in reason


def test_checkpoint_skipped_when_gpu_facts_failed():
    reason = BY_NAME["checkpoint_sync"].skip({"gpu_facts": {"failed": True, "msg": "boom",
                                                            "ansible_facts": {"nvidia": {"probe": {"status": "ok"}}}}})
    assert reason is not None and "status None" in reason


def test_cgroup_devices_runs_when_a_driver_is_present():
    assert BY_NAME["cgroup_devices"].skip({"gpu_facts": gpu(present=True, probe={"status": "hung"})}) is None


def test_cgroup_devices_skip_reasons():
    failed = BY_NAME["cgroup_devices"].skip({"gpu_facts": {"failed": True, "msg": "pynvml missing"}})
    assert failed == "gpu_facts failed, so whether an NVIDIA driver is present is unknown: pynvml missing"
    absent = BY_NAME["cgroup_devices"].skip({"gpu_facts": gpu(present=False, probe={"status": "absent"})})
    assert absent == "no NVIDIA driver present (gpu_facts: probe absent)"
    unread = BY_NAME["cgroup_devices"].skip({"gpu_facts": gpu(
        present=False, probe={"status": "absent", "error": "no libnvidia-ml"},
        warnings=["cannot read /proc/devices: EACCES", "unrelated"])})
    assert unread == ("no NVIDIA driver present (gpu_facts: probe absent, no libnvidia-ml); but procfs was not "
                      "fully readable: cannot read /proc/devices: EACCES")


# --------------------------------------------------------------------------- chaining

AUDIT = dict((k, o.get("default")) for k, o in probes.audit_argument_spec().items())
AUDIT.update(nvidia_proc_path="/host/nvproc", proc_path="/host/proc", dev_path="/host/dev", catalog_extra=[],
             _catalog=[{"component": "driver"}])


def test_driver_guard_gets_gpu_facts():
    nv = dict(driver_version="570.158.01", kernel_module_version="570.158.01", mig_mixed=True, mig_enabled="yes",
              gpus=[{"name": "NVIDIA H100 80GB HBM3"}, {"name": None}, "junk", {"name": "NVIDIA A100"}])
    params = BY_NAME["driver_guard"].params(AUDIT, {"gpu_facts": gpu(**nv)})
    assert params["driver_version"] == "570.158.01" and params["kernel_module_version"] == "570.158.01"
    assert params["mig_mixed"] is True and params["mig_enabled"] is None  # not a bool: unknown
    assert params["gpu_names"] == ["NVIDIA H100 80GB HBM3", "NVIDIA A100"]
    # the audit's paths, the module's defaults for the rest
    assert params["proc_path"] == "/host/nvproc" and params["dev_path"] == "/host/dev"
    assert params["state"] == "audit" and params["backend"] == "auto" and params["skip_entries"] == []
    assert params["_catalog"] == [{"component": "driver"}] and params["command_timeout"] == 120.0


def test_driver_guard_detects_itself_when_gpu_facts_failed():
    params = BY_NAME["driver_guard"].params(AUDIT, {"gpu_facts": {"failed": True, "msg": "x"}})
    assert params["driver_version"] is None and params["gpu_names"] == [] and params["mig_mixed"] is None


def test_checkpoint_gets_the_kubelet_path_and_device_ids():
    results = {"gpu_facts": gpu(device_ids=["GPU-1", "MIG-2"]),
               "kubelet_facts": {"ansible_facts": {"kubelet": {"checkpoint_path": "/data/kubelet/cp"}}}}
    params = BY_NAME["checkpoint_sync"].params(AUDIT, results)
    assert params["path"] == "/data/kubelet/cp" and params["device_ids"] == ["GPU-1", "MIG-2"]
    assert params["state"] == "checked" and params["resource_names"] == ["nvidia.com/*"]


def test_checkpoint_default_path_when_kubelet_facts_failed():
    results = {"gpu_facts": gpu(device_ids=[]),
               "kubelet_facts": {"failed": True, "ansible_facts": {"kubelet": {"checkpoint_path": "/x"}}}}
    assert BY_NAME["checkpoint_sync"].params(AUDIT, results)["path"] == checkpoint.DEFAULT_PATH


def test_checkpoint_fails_like_its_module_without_device_ids():
    with pytest.raises(ProbeFailed) as e:
        BY_NAME["checkpoint_sync"].params(AUDIT, {"gpu_facts": gpu(device_ids=None)})
    assert e.value.msg == "missing required arguments: device_ids"


def test_kubelet_config_path_empty_means_unset():
    assert BY_NAME["kubelet_facts"].params(dict(AUDIT, kubelet_config_path=""), {})["config_path"] is None
    assert BY_NAME["kubelet_facts"].params(dict(AUDIT, kubelet_config_path="/etc/k.yaml"), {})["config_path"] \
        == "/etc/k.yaml"
    assert BY_NAME["kubelet_facts"].params(AUDIT, {})["proc_path"] == "/host/proc"


def test_cgroup_devices_takes_the_nvidia_procfs():
    params = BY_NAME["cgroup_devices"].params(dict(AUDIT, cgroup_mode="list"), {})
    assert params["proc_path"] == "/host/nvproc" and params["mode"] == "list"
    assert params["probe_method"] == "access" and params["process_evidence"] is True


def test_params_never_share_mutable_defaults():
    a = BY_NAME["checkpoint_sync"].params(AUDIT, {"gpu_facts": gpu(device_ids=[])})
    a["resource_names"].append("x")
    assert probe_options.CHECKPOINT_SYNC["resource_names"]["default"] == ["nvidia.com/*"]


def test_an_option_passed_on_from_the_controller_keeps_the_probes_default_but_no_path_type():
    """rollout_node_check and reboot_need pass node paths on to the probe modules: the probe's
    default and choices, type str (a path option would be expanded on the controller), a copy."""
    dev = probe_options.passed_on(probe_options.GPU_FACTS, "dev_path")
    assert dev == {"type": "str", "default": "/dev"}
    dev["default"] = "/host/dev"
    assert probe_options.GPU_FACTS["dev_path"] == {"type": "path", "default": "/dev"}
    backend = probe_options.passed_on(probe_options.GPU_FACTS, "backend")
    assert backend == probe_options.GPU_FACTS["backend"] and backend["choices"] is not probe_options.GPU_BACKENDS
    assert probe_options.passed_on(probe_options.GPU_FACTS, "timeout", required=True) == {
        "type": "float", "default": 10.0, "required": True}


# --------------------------------------------------------------------------- option specs

def test_audit_options_take_the_probes_specs():
    spec = probes.audit_argument_spec()
    for probe in probes.REGISTRY:
        for audit_name, name in probe.audit_options.items():
            want = dict(probe.options[name])
            if audit_name in probes.AUDIT_FALLBACKS:
                want.pop("default", None)
            assert spec[audit_name] == want, (probe.name, audit_name)
    assert "default" not in spec["nvidia_proc_path"]
    assert set(probes.EVALUATION_OPTIONS) <= set(spec)


def _doc_block(path, variable="DOCUMENTATION"):
    with open(path) as f:
        text = f.read()
    return yaml.safe_load(text.split('%s = r"""' % variable, 1)[1].split('"""', 1)[0])


def _documented_options(module):
    """The module's documented options with those of its kubegpu.fleet doc fragments, as
    ansible-doc merges them."""
    doc = _doc_block(os.path.join(REPO, "plugins", "modules", module + ".py"))
    options = dict(doc["options"])
    for fragment in doc.get("extends_documentation_fragment") or []:
        if fragment.startswith("kubegpu.fleet."):
            name, _dot, variable = fragment[len("kubegpu.fleet."):].partition(".")
            path = os.path.join(REPO, "plugins", "doc_fragments", name + ".py")
            options.update(_doc_block(path, variable.upper() or "DOCUMENTATION")["options"])
    return options


@pytest.mark.parametrize("probe", probes.REGISTRY, ids=lambda p: p.name)
def test_probe_options_are_the_modules_documented_options(probe):
    """Every option the registry gives a probe is documented by the probe's module with the same
    type, default, choices and elements (the single-probe modules build their argument_spec from
    probe_options; this catches a module documenting something else)."""
    documented = _documented_options(probe.name)
    for name, spec in probe.options.items():
        if name.startswith("_"):
            continue
        doc = documented[name]
        assert doc.get("type", "str") == spec.get("type", "str"), (name, doc)
        if "default" in spec:
            assert doc.get("default") == spec["default"], name
        else:
            assert doc.get("default") is None, name
        assert doc.get("choices") == spec.get("choices"), name
        assert doc.get("elements") == spec.get("elements"), name
        assert bool(doc.get("required")) == bool(spec.get("required")), name


def test_audit_node_documents_its_options():
    documented = _documented_options("audit_node")
    spec = probes.audit_argument_spec()
    assert set(documented) == set(spec)
    for name, o in spec.items():
        assert documented[name].get("default") == o.get("default"), name
        assert documented[name].get("type", "str") == o.get("type", "str"), name


def test_checkpoint_default_path_is_the_checkpoint_modules():
    assert probe_options.CHECKPOINT_PATH == checkpoint.DEFAULT_PATH


# --------------------------------------------------------------------------- evaluation input

def test_evaluation_input_maps_each_probe():
    results = {
        "gpu_facts": gpu(present=True, driver_version="570.1"),
        "kubelet_facts": {"changed": False, "failed": True, "msg": "proc_path '/x' is not a directory"},
        "driver_guard": {"changed": False, "verdict": "ok"},
        "checkpoint_sync": {"changed": False, "skipped": True, "skip_reason": "r"},
        "cgroup_devices": {"changed": False, "failed": True},
        "stack_facts": {"changed": False, "ansible_facts": {"nvidia_stack": {"kernel_modules": "open"}}},
    }
    ctx, errors = probes.evaluation_input(results)
    assert ctx == {"nvidia": {"present": True, "driver_version": "570.1"}, "kubelet": {},
                   "driver_guard": {"changed": False, "verdict": "ok"},
                   "checkpoint": {"changed": False, "skipped": True, "skip_reason": "r"}, "cgroups": {},
                   "stack": {"kernel_modules": "open"}}
    assert errors == {"kubelet_facts": "proc_path '/x' is not a directory", "cgroup_devices": "failed"}


def test_evaluation_input_of_malformed_results():
    ctx, errors = probes.evaluation_input({"gpu_facts": "junk", "kubelet_facts": {"ansible_facts": {"kubelet": []}}})
    assert ctx["nvidia"] == {} and ctx["kubelet"] == {} and ctx["driver_guard"] == {} and errors == {}


# --------------------------------------------------------------------------- the registry run

class Host(object):
    """What a probe gets from the module: real commands, a PATH lookup, warnings collected."""

    def __init__(self):
        self.warned = []

    def warn(self, msg):
        self.warned.append(msg)

    @staticmethod
    def run_command(args, **kwargs):
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                           check=False, timeout=60)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    @staticmethod
    def get_bin_path(name, required=False, opt_dirs=None):
        return None  # no journalctl, dpkg-query, rpm or nvidia-smi on this "node"


def _run_probe(name, func):
    try:
        return func(lambda w: None)
    except ProbeFailed as e:
        out = dict(changed=False, failed=True, msg=e.msg)
        out.update(e.result)
        return out


def test_run_all_on_a_node_without_gpu_or_kubelet(tmp_path):
    """The real probes, chained and skipped by the registry, on an empty node: gpu_facts finds no
    driver in the procfs it falls back to, kubelet_facts finds no kubelet, driver_guard fails
    without a catalog, and the two probes that need a driver are skipped with the registry's reasons."""
    for d in ("proc", "dev", "root", "sys", "cgroup"):
        (tmp_path / d).mkdir()
    params = dict(AUDIT, proc_path=str(tmp_path / "proc"), nvidia_proc_path=None, dev_path=str(tmp_path / "dev"),
                  driver_root=str(tmp_path / "root"), sys_path=str(tmp_path / "sys"), xid=False,
                  cgroup_root=str(tmp_path / "cgroup"), _catalog=None, backend="nvidia_smi")
    clock = iter(range(100))
    results, elapsed = probes.run_all(params, Host(), _run_probe, lambda: float(next(clock)))
    assert list(results) == list(probes.NAMES)
    nv = results["gpu_facts"]["ansible_facts"]["nvidia"]
    assert nv["present"] is False and nv["probe"]["status"] == "absent"
    assert results["kubelet_facts"]["ansible_facts"]["kubelet"]["running"] is False, results["kubelet_facts"]
    assert results["driver_guard"]["failed"] and "no catalog" in results["driver_guard"]["msg"]
    assert results["checkpoint_sync"]["skipped"] and results["cgroup_devices"]["skipped"]
    assert results["cgroup_devices"]["skip_reason"].startswith("no NVIDIA driver present")
    assert elapsed["checkpoint_sync"] == 0 and elapsed["cgroup_devices"] == 0
    assert elapsed["gpu_facts"] == 1.0
