"""AWX paths: the audit through ansible-runner (as AWX runs jobs), and an execution
environment build context from ansible-builder."""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    assert proc.returncode == 0, "%s\n%s\n%s" % (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


@pytest.fixture(scope="module")
def built_collection(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", REPO, "--output-path", str(out)])
    tarballs = [p for p in os.listdir(str(out)) if p.endswith(".tar.gz")]
    assert tarballs == ["kubegpu-fleet-0.1.0.tar.gz"]
    return os.path.join(str(out), tarballs[0])


def test_collection_tarball_leaves_out_local_state(built_collection):
    listing = run(["tar", "-tzf", built_collection]).stdout.split()
    assert "meta/execution-environment.yml" in listing and "catalog/v2/driver.yml" in listing
    assert not [p for p in listing if p.startswith((".venv", ".build", ".lab", ".git/"))]


def test_builder_introspects_and_creates_context(built_collection, tmp_path):
    cols = tmp_path / "collections"
    run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "--force", "-p", str(cols), built_collection])
    intro = run([os.path.join(BIN, "ansible-builder"), "introspect", str(cols)]).stdout
    assert "kubernetes>=25.3.0" in intro and "kubegpu.fleet" in intro
    assert "tomlkit>=" in intro  # toolkit_config edits config.toml on the controller
    assert "openssh-client [platform:dpkg]" in intro
    ctx_src = tmp_path / "ee"
    shutil.copytree(os.path.join(REPO, "tests", "integration", "ee"), str(ctx_src))
    shutil.copy(built_collection, str(ctx_src / "kubegpu-fleet.tar.gz"))
    (ctx_src / "requirements.yml").write_text(
        "---\ncollections:\n  - name: /tmp/kubegpu-fleet.tar.gz\n    type: file\n")
    run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
         "-c", str(tmp_path / "context"), "--output-filename", "Containerfile"], cwd=str(ctx_src))
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert "quay.io/ansible/awx-ee:24.6.1" in containerfile
    assert "COPY _build/collections/kubegpu-fleet.tar.gz /tmp/kubegpu-fleet.tar.gz" in containerfile
    assert (tmp_path / "context" / "_build" / "collections" / "kubegpu-fleet.tar.gz").exists()
    assert "ansible-galaxy collection install" in containerfile or "install-from-bindep" in containerfile \
        or "introspect" in containerfile


def test_audit_through_ansible_runner(tmp_path):
    import ansible_runner

    # A node whose NVIDIA kernel module is loaded but /dev/nvidia-uvm was never created.
    proc = tmp_path / "nvproc"
    (proc / "driver" / "nvidia").mkdir(parents=True)
    (proc / "modules").write_text("nvidia 54009856 0 - Live 0x0\n")
    (proc / "devices").write_text("Character devices:\n195 nvidia\n508 nvidia-uvm\n\nBlock devices:\n")
    (proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.172.08  Release Build\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    reports = tmp_path / "reports"
    pdd = tmp_path / "runner"
    (pdd / "inventory").mkdir(parents=True)
    (pdd / "inventory" / "hosts.json").write_text(json.dumps({"all": {"hosts": {"gpu-node-1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "kubegpu_nvidia_proc_path": str(proc), "kubegpu_dev_path": str(dev),
        "kubegpu_gpu_backend": "nvidia_smi", "kubegpu_gpu_probe_timeout": 3,
        # an empty kernel log, never this machine's /dev/kmsg: its ring buffer may have wrapped, and an
        # incomplete Xid scan is a finding of its own
        "kubegpu_kmsg_path": str(kmsg)}}}}))
    envvars = {"ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, ".build", "collections"),
               "KUBEGPU_AUDIT_REPORT_DIR": str(reports), "PATH": BIN + os.pathsep + os.environ["PATH"],
               "ANSIBLE_LOCALHOST_WARNING": "0"}
    r = ansible_runner.run(private_data_dir=str(pdd), playbook="kubegpu.fleet.audit",
                           extravars={"kubegpu_audit_cluster": False, "ansible_python_interpreter": sys.executable},
                           envvars=envvars, quiet=True)
    assert r.status == "failed" and r.rc == 2, r.stdout.read()[-3000:]
    assert r.stats["failures"] == {"localhost": 1}
    # one task execution for the node (audit_node: its probes and, on the controller, the
    # evaluation), one job event with the findings
    probed = [e for e in r.events if e["event"] == "runner_on_ok"
              and e["event_data"].get("task_action") == "kubegpu.fleet.audit_node"
              and e["event_data"].get("host") == "gpu-node-1"]
    assert len(probed) == 1
    # the role's lean result (kubegpu_audit_details false): the findings are in the node's evaluation
    res = probed[0]["event_data"]["res"]
    findings = res["ansible_facts"]["kubegpu_audit"]["findings"]
    assert "findings" not in res and set(res["ansible_facts"]) == {"kubegpu_audit"}
    assert [f["id"] for f in findings] == ["uvm.node_missing"], findings
    artifact = os.path.join(str(pdd), "artifacts", r.config.ident)
    assert open(os.path.join(artifact, "status")).read() == "failed"
    assert open(os.path.join(artifact, "rc")).read() == "2"
    job_events = os.listdir(os.path.join(artifact, "job_events"))
    assert len(job_events) == len(list(r.events))
    report = json.load(open(str(reports / "kubegpu-audit.json")))
    assert report["summary"]["by_id"]["uvm.node_missing"]["nodes"] == ["gpu-node-1"]
