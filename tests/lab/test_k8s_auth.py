"""One Kubernetes identity for kubernetes.core and kubegpu.fleet, as an AWX job gets it.

The AWX / AAP credential type "OpenShift or Kubernetes API Bearer Token" injects K8S_AUTH_HOST,
K8S_AUTH_API_KEY and K8S_AUTH_SSL_CA_CERT (or K8S_AUTH_VERIFY_SSL=false) into the job, and the job
has no kubeconfig at all. These tests run real ansible-playbook against the API double (real TLS,
real bearer token check) with exactly that environment: HOME without .kube, no KUBECONFIG, the
play's module_defaults built from unset kubegpu_k8s_* variables (so they must omit themselves and
leave the environment to apply), a kubegpu.fleet.node_maintenance and audit_cluster task and a
kubernetes.core.k8s_info task in the same play. A wrong token fails cleanly, and the token never
appears in any output, -vvv included.
"""
import json
import os
import subprocess

import pytest
import yaml

from apidouble_fixture import api_double, api_double_factory  # noqa: F401 pylint: disable=unused-import
from test_api_double import cluster, play_env

# What the roles' vars/main.yml and the playbooks put into module_defaults (unset -> omit).
K8S_AUTH = {
    "kubeconfig": "{{ kubegpu_kubeconfig | default(omit, true) }}",
    "context": "{{ kubegpu_kube_context | default(omit, true) }}",
    "host": "{{ kubegpu_k8s_host | default(omit, true) }}",
    "api_key": "{{ kubegpu_k8s_api_key | default(omit, true) }}",
    "ca_cert": "{{ kubegpu_k8s_ca_cert | default(omit, true) }}",
    "validate_certs": "{{ omit if (kubegpu_k8s_validate_certs | default(none)) in [none, ''] "
                      "else kubegpu_k8s_validate_certs | bool }}",
}


def play(tasks):
    return [{"hosts": "localhost", "gather_facts": False,
             "module_defaults": {"group/kubernetes.core.k8s": dict(K8S_AUTH), "group/kubegpu.fleet.k8s": dict(K8S_AUTH)},
             "tasks": tasks}]


def tasks():
    return [
        {"name": "read", "kubegpu.fleet.node_maintenance": {"name": "gpu-0"}, "ignore_errors": True},
        {"name": "cordon", "kubegpu.fleet.node_maintenance": {
            "name": "gpu-1", "state": "patched", "unschedulable": True,
            "annotations": {"kubegpu.io/maintenance": '{"was_unschedulable":false}'}}, "ignore_errors": True},
        {"name": "core", "kubernetes.core.k8s_info": {"kind": "Node", "name": "gpu-0"}, "ignore_errors": True},
        {"name": "view", "kubegpu.fleet.audit_cluster": {}, "ignore_errors": True},
    ]


@pytest.fixture
def awx_job(tmp_path, monkeypatch, api_double_factory):
    """The double, and a job environment without any kubeconfig: returns (proc, env builder)."""
    proc = api_double_factory(seed=cluster())
    home = tmp_path / "home"
    home.mkdir()
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") + tuple(
            v for v in os.environ if v.startswith("K8S_AUTH_")):
        monkeypatch.delenv(var, raising=False)

    def env(**k8s_auth):
        out = play_env(tmp_path)
        out["HOME"] = str(home)
        out.update(("K8S_AUTH_" + k, v) for k, v in k8s_auth.items())
        return out

    assert not (home / ".kube").exists()
    return proc, env


def cordons(proc):
    return [e for e in proc.client.history(resource="nodes")
            if e["name"] == "gpu-1" and e["verb"] == "patch" and e.get("changed")]


def assert_never_shown(token, *outputs):
    for out in outputs:
        assert token not in out, "the token appears in the output"


def test_bearer_token_credential_with_a_ca_file(ansible, awx_job):
    proc, env = awx_job
    res = ansible.playbook(play(tasks()), diff=True, env=env(
        HOST=proc.url, API_KEY=proc.token, SSL_CA_CERT=proc.info["ca_file"], VERIFY_SSL="true"))
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task("read")["exists"] and res.task("read")["node"]["metadata"]["name"] == "gpu-0"
    assert res.task("cordon")["changed"] and len(cordons(proc)) == 1
    assert res.task("cordon")["diff"]["after"]["unschedulable"] is True
    assert [n["metadata"]["name"] for n in res.task("core")["resources"]] == ["gpu-0"]
    view = res.task("view")
    assert sorted(view["cluster"]["nodes"]) == ["cpu-0", "gpu-0", "gpu-1", "gpu-2"] and view["api_calls"] >= 3
    assert_never_shown(proc.token, res.stdout, res.stderr)


def test_bearer_token_credential_with_verification_off_and_no_ca(ansible, awx_job):
    proc, env = awx_job
    res = ansible.playbook(play(tasks()), env=env(HOST=proc.url, API_KEY=proc.token, VERIFY_SSL="false"))
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task("read")["exists"] and res.task("cordon")["changed"] and len(cordons(proc)) == 1
    assert [n["metadata"]["name"] for n in res.task("core")["resources"]] == ["gpu-0"]
    assert "gpu-0" in res.task("view")["cluster"]["nodes"]
    assert_never_shown(proc.token, res.stdout, res.stderr)


def test_verification_on_without_the_ca_fails_cleanly(ansible, awx_job):
    proc, env = awx_job
    res = ansible.playbook(play(tasks()[:1]), env=env(HOST=proc.url, API_KEY=proc.token))
    read = res.task("read")
    assert read["failed"] and read["msg"].startswith("read Node gpu-0: ") and "CERTIFICATE_VERIFY_FAILED" in read["msg"]
    assert "Traceback" not in read["msg"]
    assert_never_shown(proc.token, res.stdout, res.stderr)


def test_a_wrong_token_fails_cleanly_and_is_never_shown(ansible, awx_job):
    proc, env = awx_job
    wrong = "wrong-" + proc.token[::-1]
    res = ansible.playbook(play(tasks()), env=env(HOST=proc.url, API_KEY=wrong, SSL_CA_CERT=proc.info["ca_file"]))
    assert res.rc == 0 and res.stats["localhost"]["ignored"] == 4   # every task refused, each reported
    read, cordon, view = res.task("read"), res.task("cordon"), res.task("view")
    assert read["failed"] and read["msg"] == (
        "read Node gpu-0: HTTP 401 Unauthorized (credentials from host %s with a bearer token)" % proc.url)
    assert cordon["failed"] and "HTTP 401" in cordon["msg"] and view["failed"] and "HTTP 401" in view["msg"]
    assert res.task("core")["failed"]          # kubernetes.core, same identity, refused as well
    # ansible-core 2.19 marks a failed action result "exception": "(traceback unavailable)" - none was raised
    assert all("Traceback" not in (t.get("msg") or "") + str(t.get("exception") or "") for t in (read, cordon, view))
    assert cordons(proc) == []
    assert_never_shown(wrong, res.stdout, res.stderr)
    assert_never_shown(proc.token, res.stdout, res.stderr)


def test_role_variables_override_the_environment_and_vvv_never_prints_the_token(ansible, awx_job, tmp_path):
    """kubegpu_k8s_* set (a vars file, as an inventory would): they win over a wrong K8S_AUTH_*; the run
    at -vvv with the default callback and --diff never prints the token (options or environment)."""
    proc, env = awx_job
    varsfile = tmp_path / "k8s.yml"
    varsfile.write_text(yaml.safe_dump({"kubegpu_k8s_host": proc.url, "kubegpu_k8s_api_key": proc.token,
                                        "kubegpu_k8s_ca_cert": proc.info["ca_file"],
                                        "kubegpu_k8s_validate_certs": "yes"}))
    path = tmp_path / "vvv.yml"
    registered = [dict(t, register="kubegpu_" + t["name"]) for t in tasks()]
    path.write_text(yaml.safe_dump(play(registered + [{"name": "show", "ansible.builtin.debug": {
        "var": "kubegpu_read"}}]), sort_keys=False))
    run_env = ansible.env(env(HOST="https://127.0.0.1:9", API_KEY="env-token-that-must-lose", VERIFY_SSL="false"))
    run_env["ANSIBLE_STDOUT_CALLBACK"] = "default"
    run_env.pop("ANSIBLE_CALLBACKS_ENABLED")   # "" reads as one callback with an empty name in 2.19
    proc_run = subprocess.run(
        [os.path.join(os.path.dirname(ansible.python), "ansible-playbook"), str(path), "-i", "localhost,", "-c", "local",
         "-vvv", "--diff", "-e", "@" + str(varsfile)],
        cwd=str(tmp_path), env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
        timeout=600, check=False)
    out = proc_run.stdout
    assert proc_run.returncode == 0, out[-4000:]
    assert "ok: [localhost]" in out and '"unschedulable": true' in out and len(cordons(proc)) == 1
    assert "failed=0" in out and '"name": "gpu-0"' in out
    assert_never_shown(proc.token, out)
    assert json.dumps(proc.token) not in out


@pytest.mark.parametrize("source", ["environment", "role variables"])
def test_the_roles_pass_the_same_settings_to_kubernetes_core_and_the_collection(ansible, awx_job, source):
    """The audit role's cluster entry point (kubegpu.fleet.audit_cluster reading the API) and the
    device_plugin role's cluster entry point (kubernetes.core.k8s_info): with the AWX environment and
    the role variables unset (module_defaults omit themselves), and with the role variables set over
    an environment that points elsewhere (module_defaults carry them to both)."""
    proc, env = awx_job
    if source == "environment":
        job_env, extra = env(HOST=proc.url, API_KEY=proc.token, SSL_CA_CERT=proc.info["ca_file"]), {}
    else:
        job_env = env(HOST="https://127.0.0.1:9", API_KEY="not-this-one", VERIFY_SSL="false")
        extra = {"kubegpu_k8s_host": proc.url, "kubegpu_k8s_api_key": proc.token,
                 "kubegpu_k8s_ca_cert": proc.info["ca_file"], "kubegpu_k8s_validate_certs": True}
    plays = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "audit", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit", "tasks_from": "cluster"}},
        {"name": "device plugin",
         "ansible.builtin.include_role": {"name": "kubegpu.fleet.device_plugin", "tasks_from": "cluster"},
         "vars": {"kubegpu_device_plugin_node_hosts": [], "kubegpu_device_plugin_fact_hosts": [],
                  "kubegpu_device_plugin_pass_device_specs": "false"}}]}]
    plays[0]["vars"] = extra
    res = ansible.playbook(plays, check=True, env=job_env)
    assert res.rc == 0, res.stdout[-3000:]
    view = res.task("kubegpu.fleet.audit : Read the cluster from the Kubernetes API and build the per-node view")
    assert sorted(view["cluster"]["nodes"]) == ["cpu-0", "gpu-0", "gpu-1", "gpu-2"]
    nodes = res.task("kubegpu.fleet.device_plugin : List nodes")
    assert len(nodes["resources"]) == 4
    assert_never_shown(proc.token, res.stdout, res.stderr)
