"""kubelet_facts_run (the kubelet_facts module's run function) warns once per impostor through
the ``warn`` it is given: the module's main() only builds the AnsibleModule and calls it."""
import os

from ansible_collections.kubegpu.fleet.plugins.module_utils.audit import probe_options
from ansible_collections.kubegpu.fleet.plugins.module_utils.kubelet.facts_run import kubelet_facts_run
from ansible_collections.kubegpu.fleet.tests.fixtures.kubelet.kubelet_fakeproc import FakeProc


def _user_exe(tmp_path):
    path = tmp_path / "userbin" / "kubelet"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\ntouch %s\n" % (tmp_path / "impostor-ran"))
    os.chmod(str(path), 0o755)
    os.chown(str(path), 65534, 65534)
    return str(path)


def _params(proc):
    params = probe_options.defaults(probe_options.KUBELET_FACTS)
    params.update(proc_path=proc, scan_journal=False, timeout=2.0)
    return params


def _no_bin(name):
    return None


def _tree(tmp_path):
    fp = FakeProc(tmp_path)
    exe = _user_exe(tmp_path)
    fp.add_process(300, ["/home/mallory/kubelet", "--config=/etc/shadow"], exe=exe, uid=65534,
                   starttime=10)
    fp.add_process(600, ["/usr/bin/kubelet", "--root-dir=/var/lib/kl"], starttime=900)
    return fp, exe


def test_each_impostor_is_warned_with_the_module_message(tmp_path):
    fp, exe = _tree(tmp_path)
    warnings = []
    result = kubelet_facts_run(_params(fp.path), None, _no_bin, warnings.append)
    facts = result["ansible_facts"]["kubelet"]
    assert result["changed"] is False and facts["pid"] == 600
    assert [i["pid"] for i in facts["impostors"]] == [300]
    assert warnings == [
        "process 300 is named kubelet but is not the kubelet (uid 65534, executable %s): "
        "runs as uid 65534 (effective 65534), not root; ignored" % exe]
    assert not (tmp_path / "impostor-ran").exists()


def test_no_impostor_no_warning_and_warn_is_optional(tmp_path):
    fp = FakeProc(tmp_path)
    fp.add_process(600, ["/usr/bin/kubelet"], starttime=900)
    warnings = []
    result = kubelet_facts_run(_params(fp.path), None, _no_bin, warnings.append)
    assert result["ansible_facts"]["kubelet"]["impostors"] == [] and warnings == []
    # audit_node's kubelet probe passes no warn: the impostors are in the facts only.
    fp2, _exe = _tree(tmp_path / "second")
    result = kubelet_facts_run(_params(fp2.path), None, _no_bin)
    assert [i["pid"] for i in result["ansible_facts"]["kubelet"]["impostors"]] == [300]
