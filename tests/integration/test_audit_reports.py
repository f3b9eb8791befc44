"""The audit's controller side end to end: audit_evaluate per host -> audit_report -> files,
then the HTML in a real headless Chromium and the metrics through promtool."""
import datetime
import json
import os
import shutil
import subprocess

import pytest
import yaml

CHROMIUM = shutil.which("chromium")
FAIL_TASK = "kubegpu.fleet.audit : Fail on GPU nodes the audit did not see or on findings at or above critical"
PROMTOOL = shutil.which("promtool")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(REPO, "galaxy.yml")) as _fh:
    GALAXY = yaml.safe_load(_fh)

NV_BAD = {"present": True, "probe": {"status": "hung", "backend": "nvml", "elapsed": 10.2, "timeout": 10.0},
          "driver_version": "570.148.08", "mig_mixed": True,
          "device_nodes": [{"name": "nvidia-uvm", "path": "/dev/nvidia-uvm", "exists": True}],
          "kernel_modules": {"nvidia_uvm": {"loaded": True}}}
# A GPU node the audit saw whole (coverage: a GPU node), with nothing wrong.
NV_OK = {"present": True, "source": "nvml", "probe": {"status": "ok", "backend": "nvml"},
         "pci": {"available": True, "gpus": [{"bus_id": "0000:3b:00.0"}], "errors": []},
         "gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "pci_bus_id": "00000000:3B:00.0"}],
         "device_nodes": [{"name": "nvidia-uvm", "path": "/dev/nvidia-uvm", "exists": True}],
         "kernel_modules": {"nvidia_uvm": {"loaded": True}}}
GUARD_BAD = {"verdict": "known_bad", "branch": 570, "driver_version": "570.148.08", "recommended_version": "570.172.08",
             "matches": [{"id": "nvml-r570-mig-hang", "references": ["https://github.com/NVIDIA/gpu-operator/issues/1361"]}],
             "compute_utils": {"checked": True, "installed": False, "package": "nvidia-compute-utils-570"}}


def security_findings(node):
    """security.<component> findings for ``node`` from real catalog v2 matches (shared contract shape)."""
    from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
    entries = catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2"))
    out = []
    for component, version, facts in (("container-toolkit", "1.17.7", {"runtime": "runc", "injection_mode": "legacy"}),
                                      ("gpu-operator", "24.6.1", {"cdi_enabled": False, "runtime": "runc"})):
        matches = [m for m in catalog_evaluate.evaluate(entries, component, version, facts)["matches"] if m["kind"] == "security"]
        out.append({"id": "security.%s" % component, "node": node, "severity": "critical",
                    "title": "%s %s has published security advisories" % (component, version),
                    "evidence": {"component": component, "version": version,
                                 "cves": sorted(set(c for m in matches for c in m["cves"])),
                                 "max_cvss": max(m["max_cvss"] for m in matches),
                                 "advisories": [dict((k, m[k]) for k in ("id", "title", "cves", "max_cvss", "severity",
                                                                         "status", "affected_range", "fixed",
                                                                         "unknown_conditions", "sources"))
                                                for m in matches]},
                    "remediation": {"summary": "upgrade %s" % component}})
    return out


def run_audit(ansible, tmp_path, check=False, cluster_findings=None, report_vars=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    report_dir = str(tmp_path / "reports")
    inventory = tmp_path / "inv.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        "gpu-bad": {"ansible_connection": "local"},
        "gpu-ok": {"ansible_connection": "local"},
        "gpu-gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                     "ansible_ssh_common_args": "-o ConnectTimeout=2 -o StrictHostKeyChecking=no"},
    }}}))
    plays = [
        {"name": "nodes", "hosts": "all", "gather_facts": False, "tasks": [
            {"name": "Remember hosts", "ansible.builtin.set_fact": {"kubegpu_audit_play_hosts": "{{ ansible_play_hosts_all }}"},
             "delegate_to": "localhost", "delegate_facts": True, "run_once": True},
            {"name": "Reach the node", "ansible.builtin.ping": None, "register": "reach", "ignore_unreachable": True},
            {"name": "Evaluate", "kubegpu.fleet.audit_evaluate": {
                "node": "{{ inventory_hostname }}",
                "unreachable": "{{ reach.msg if reach is unreachable else '' }}",
                "nvidia": "{{ nv if inventory_hostname == 'gpu-bad' else nv_ok }}",
                "kubelet": {"running": True, "pid": 1},
                "driver_guard": "{{ guard if inventory_hostname == 'gpu-bad' else {'verdict': 'ok'} }}"},
             "vars": {"nv": NV_BAD, "nv_ok": NV_OK, "guard": GUARD_BAD}},
        ]},
        {"name": "report", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "Fleet report", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit", "tasks_from": "report"},
             "vars": dict({"kubegpu_audit_report_dir": report_dir}, **(report_vars or {}),
                          **({"kubegpu_cluster": {"cluster_findings": cluster_findings}} if cluster_findings else {}))}]},
    ]
    res = ansible.playbook(plays, inventory=str(inventory), check=check,
                           env={"ANSIBLE_HOST_KEY_CHECKING": "False"})
    return res, report_dir


def test_reports_written_and_play_fails_on_critical(ansible, tmp_path):
    res, report_dir = run_audit(ansible, tmp_path)
    assert res.rc == 2, res.stdout[-3000:]
    fail = res.task(FAIL_TASK, host="localhost")
    assert fail["failed"] and "driver.known_bad@gpu-bad" in fail["msg"]
    # the same task, once, says the run's other reason: gpu-gone unreachable, 1 of 3 where 10% allows 0
    assert ("the audit did not see 1 of the 3 GPU nodes in scope (1 unreachable); max_unaudited 10% allows 0 of 3 "
            "(rounded down): exceeded. Not seen: gpu-gone (unreachable).") in fail["msg"]
    assert [t["_task"] for t in res.tasks() if t.get("failed")] == [FAIL_TASK]
    with open(os.path.join(report_dir, "kubegpu-audit.json")) as f:
        report = json.load(f)
    s = report["summary"]
    assert (s["nodes_total"], s["nodes_audited"], s["nodes_unreachable"], s["nodes_clean"]) == (3, 2, 1, 1)
    assert s["unreachable"] == ["gpu-gone"]
    # what the audit saw: both audited hosts are GPU nodes (a host it saw nothing of is never clean)
    assert (s["nodes_not_gpu"], s["nodes_not_inspected"]) == (0, 0)
    ok = [n for n in report["nodes"] if n["name"] == "gpu-ok"][0]
    assert ok["coverage"]["status"] == "gpu_node" and ok["coverage"]["gpu_models"] == {"NVIDIA A100-SXM4-80GB": 1}
    bad = [n for n in report["nodes"] if n["name"] == "gpu-bad"][0]
    # 570.148.08 is also below the fixes of NVIDIA's driver bulletins (catalog v2): security.driver,
    # grouped by CVE in the report
    assert sorted(f["id"] for f in bad["findings"]) == ["driver.compute_utils", "driver.known_bad",
                                                        "driver.unlisted_branch", "driver.unsupported_branch", "nvml.hung",
                                                        "security.driver"]
    cves = dict((c["id"], c) for c in report["cves"])
    assert cves["CVE-2025-33219"]["components"] == ["driver"] and cves["CVE-2025-33219"]["node_names"] == ["gpu-bad"]
    assert "570.211.01" in cves["CVE-2025-33219"]["fixed"]["driver"]
    md = open(os.path.join(report_dir, "kubegpu-audit.md")).read()
    assert "**Unreachable:** gpu-gone" in md
    # the role passes no version: the report names the collection's own (galaxy.yml in this checkout)
    assert report["collection_version"] == GALAXY["version"]
    hung = [f for f in bad["findings"] if f["id"] == "nvml.hung"][0]
    assert hung["evidence"]["timeout"] == NV_BAD["probe"]["timeout"] and hung["evidence"]["elapsed"] == 10.2
    # the report dates the bundled catalog: its newest bulletin, that bulletin's revision date and age
    from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
    entries = catalog_load.load_catalog(os.path.join(REPO, "catalog", "v2"))
    newest = max(e["advisory"]["date"] for e in entries if e.get("advisory"))
    cat = report["catalog"]
    assert cat["newest_advisory"]["date"] == newest and cat["max_age_days"] == 45 and cat["entries"] == len(entries)
    age = (datetime.date.fromisoformat(report["generated_at"][:10]) - datetime.date.fromisoformat(newest)).days
    assert cat["age_days"] == age and cat["stale"] is (age > 45)
    assert ("**Warning:** the known-bad catalog's newest bulletin" in md) is (age > 45)


def test_catalog_age_limit_and_catalog_extra_reach_the_report(ansible, tmp_path):
    """kubegpu_audit_catalog_max_age_days and kubegpu_catalog_extra go from the role to the report:
    a catalog_extra entry from a newer bulletin becomes the catalog's newest."""
    today = datetime.datetime.now(datetime.timezone.utc).date()
    extra = [{"schema_version": 2, "component": "dcgm-exporter", "version_scheme": "semver", "entries": [{
        "id": "site-dcgm-exporter-test", "kind": "security", "title": "Site bulletin", "description": "test",
        "cves": [{"id": "CVE-2026-0001", "cvss": {"version": "3.1", "base_score": 5.3,
                                                  "vector": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:L"}}],
        "severity": "medium", "affected": [{"fixed": "9.9.9"}], "remediation": "Upgrade.",
        "advisory": {"publisher": "site", "id": "site-1", "title": "Site bulletin", "revision": "2",
                     "date": today.isoformat()},
        "sources": [{"url": "https://example.com/site-1", "verified": today.isoformat(), "what": "test"}]}]}]
    _res, report_dir = run_audit(ansible, tmp_path, report_vars={"kubegpu_audit_catalog_max_age_days": 100000,
                                                                 "kubegpu_catalog_extra": extra})
    with open(os.path.join(report_dir, "kubegpu-audit.json")) as f:
        cat = json.load(f)["catalog"]
    assert cat["max_age_days"] == 100000 and cat["stale"] is False and cat["warning"] is None
    assert cat["newest_advisory"] == {"id": "site-1", "title": "Site bulletin", "revision": "2",
                                      "date": today.isoformat()}


def test_audit_role_records_an_unreachable_node(ansible, tmp_path):
    """The real role's main entry point: audit_node cannot reach the host, its action records
    it as unreachable with the connection error (one task), and the report lists it."""
    report_dir = str(tmp_path / "reports")
    inventory = tmp_path / "inv.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        "gpu-gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
                     "ansible_ssh_common_args": "-o ConnectTimeout=2 -o StrictHostKeyChecking=no"}}}}))
    plays = [
        {"name": "nodes", "hosts": "all", "gather_facts": False, "roles": [{"role": "kubegpu.fleet.audit"}]},
        {"name": "report", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "Fleet report", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit", "tasks_from": "report"},
             "vars": {"kubegpu_audit_report_dir": report_dir}}]},
    ]
    res = ansible.playbook(plays, inventory=str(inventory), env={"ANSIBLE_HOST_KEY_CHECKING": "False"})
    probe = res.task("kubegpu.fleet.audit : Audit the node", host="gpu-gone")
    assert probe.get("unreachable_node") is True and "probes" not in probe, probe
    audit = probe["ansible_facts"]["kubegpu_audit"]
    assert audit["status"] == "unreachable" and audit["findings"] == []
    assert "port 1" in audit["error"] or "Connection refused" in audit["error"], audit
    with open(os.path.join(report_dir, "kubegpu-audit.json")) as f:
        report = json.load(f)
    assert report["summary"]["unreachable"] == ["gpu-gone"]
    node = report["nodes"][0]
    assert (node["name"], node["status"]) == ("gpu-gone", "unreachable")


def unreachable_fleet(ansible, tmp_path, check=False, **report_vars):
    """The real role over three hosts none of which can be reached (the nightly job whose nodes are
    all down), then its report step."""
    report_dir = str(tmp_path / "reports")
    inventory = tmp_path / "inv.yml"
    gone = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1,
            "ansible_ssh_common_args": "-o ConnectTimeout=2 -o StrictHostKeyChecking=no"}
    inventory.write_text(json.dumps({"all": {"hosts": dict(("gpu-%d" % i, gone) for i in range(3))}}))
    plays = [
        {"name": "nodes", "hosts": "all", "gather_facts": False, "roles": [{"role": "kubegpu.fleet.audit"}]},
        {"name": "report", "hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "Fleet report", "ansible.builtin.include_role": {"name": "kubegpu.fleet.audit", "tasks_from": "report"},
             "vars": dict({"kubegpu_audit_report_dir": report_dir}, **report_vars)}]},
    ]
    res = ansible.playbook(plays, inventory=str(inventory), check=check, env={"ANSIBLE_HOST_KEY_CHECKING": "False"})
    with open(os.path.join(report_dir, "kubegpu-audit.json")) as f:
        report = json.load(f)
    return res, report, report_dir


@pytest.mark.parametrize("check", [False, True], ids=["run", "check_mode"])
def test_a_run_that_saw_no_node_fails_naming_them(ansible, tmp_path, check):
    """Every node unreachable, no finding: fail_on alone would pass; the coverage limit (default 10%)
    fails the report step once with the nodes and the limit, after the reports are written - in
    check mode the same."""
    res, report, report_dir = unreachable_fleet(ansible, tmp_path, check=check)
    assert res.rc == 2, res.stdout[-3000:]
    fail = res.task(FAIL_TASK, host="localhost")
    assert fail["failed"] and "finding(s)" not in fail["msg"], fail["msg"]
    assert fail["msg"].startswith(
        "the audit did not see 3 of the 3 GPU nodes in scope (3 unreachable); max_unaudited 10% allows 0 of 3 (rounded "
        "down): exceeded. Not seen: gpu-0 (unreachable), gpu-1 (unreachable), gpu-2 (unreachable). "), fail["msg"]
    assert '"100%" turns this check off' in fail["msg"] and os.path.join(report_dir, "kubegpu-audit.json") in fail["msg"]
    assert [t["_task"] for t in res.tasks() if t.get("failed")] == [FAIL_TASK]
    written = res.task("kubegpu.fleet.audit : Write the fleet audit report", host="localhost")
    assert [e["node"] for e in written["coverage_failing"]] == ["gpu-0", "gpu-1", "gpu-2"]
    assert all("port 1" in e["why"] or "Connection refused" in e["why"] for e in written["coverage_failing"])
    s = report["summary"]
    assert (s["nodes_unreachable"], s["failing"]) == (3, 0)
    assert s["coverage_limit"] == {"max_unaudited": "10%", "nodes_in_scope": 3, "allowed": 0, "unaudited": 3,
                                   "by_status": {"unreachable": 3, "failed": 0, "not_audited": 0, "not_inspected": 0},
                                   "nodes": ["gpu-0", "gpu-1", "gpu-2"], "exceeded": True}
    prom = open(os.path.join(report_dir, "kubegpu_audit.prom")).read().splitlines()
    assert "kubegpu_audit_coverage_limit_exceeded 1" in prom and 'kubegpu_audit_unaudited_nodes{reason="unreachable"} 3' in prom


def test_max_unaudited_100_percent_turns_the_check_off(ansible, tmp_path):
    res, report, _dir = unreachable_fleet(ansible, tmp_path, kubegpu_audit_max_unaudited="100%")
    assert res.rc == 0, res.stdout[-3000:]
    assert res.task(FAIL_TASK, host="localhost").get("skipped")
    lim = report["summary"]["coverage_limit"]
    assert (lim["max_unaudited"], lim["allowed"], lim["unaudited"], lim["exceeded"]) == ("100%", 3, 3, False)
    # a limit that is no number nor a percentage fails the report task with the reason, nothing written
    res = ansible.playbook([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "report", "ignore_errors": True, "kubegpu.fleet.audit_report": {
            "hosts": ["localhost"], "dest": str(tmp_path / "bad"), "max_unaudited": "10.5%"}}]}])
    out = res.task("report")
    assert out["failed"] and "whole percent" in out["msg"] and not os.path.exists(str(tmp_path / "bad"))


def test_a_node_pattern_that_matches_no_host_reports_no_node_not_localhost(ansible, tmp_path):
    """The collection's audit playbook with kubegpu_targets matching no host (an empty group in tonight's
    inventory): the report play's own localhost is not a node - the report has no node and passes."""
    report_dir = str(tmp_path / "reports")
    inventory = tmp_path / "inv.yml"
    inventory.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": {}}}}}))
    res = ansible.playbook([{"ansible.builtin.import_playbook": "kubegpu.fleet.audit"}], inventory=str(inventory),
                           extra_vars={"kubegpu_targets": "gpu_nodes", "kubegpu_audit_cluster": False,
                                       "kubegpu_audit_report_dir": report_dir})
    assert res.rc == 0, res.stdout[-3000:]
    with open(os.path.join(report_dir, "kubegpu-audit.json")) as f:
        report = json.load(f)
    assert report["nodes"] == [] and report["summary"]["nodes_total"] == 0, report["summary"]
    assert "localhost" not in json.dumps(report["summary"])


def test_check_mode_gives_the_same_report(ansible, tmp_path):
    _res, d1 = run_audit(ansible, tmp_path / "a")
    _res, d2 = run_audit(ansible, tmp_path / "b", check=True)
    r1 = json.load(open(os.path.join(d1, "kubegpu-audit.json")))
    r2 = json.load(open(os.path.join(d2, "kubegpu-audit.json")))
    for r in (r1, r2):
        r.pop("generated_at")
        r["run"].pop("check_mode")
    assert r1 == r2


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed; make deps installs it")
def test_prometheus_textfile_passes_promtool(ansible, tmp_path):
    _res, report_dir = run_audit(ansible, tmp_path)
    path = os.path.join(report_dir, "kubegpu_audit.prom")
    with open(path, "rb") as f:
        proc = subprocess.run([PROMTOOL, "check", "metrics"], stdin=f, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = open(path).read()
    assert 'kubegpu_finding{node="gpu-bad",id="driver.known_bad",severity="critical"} 1' in text
    assert 'kubegpu_audit_node_up{node="gpu-gone"} 0' in text


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed; make deps installs it")
def test_html_report_in_headless_chromium(ansible, tmp_path):
    _res, report_dir = run_audit(ansible, tmp_path)
    html_path = os.path.join(report_dir, "kubegpu-audit.html")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--user-data-dir=%s" % (tmp_path / "chrome-profile")]
    dom = subprocess.run([CHROMIUM] + flags + ["--dump-dom", "file://" + html_path],
                         capture_output=True, text=True, timeout=120, check=False)
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = dom.stdout
    # fleet summary on top, matrix coloured by severity, details with evidence and remediation
    assert page.index('id="summary"') < page.index('id="matrix"') < page.index('id="details"')
    critical = json.load(open(os.path.join(report_dir, "kubegpu-audit.json")))["summary"]["by_severity"]["critical"]
    assert critical >= 2  # driver.known_bad, nvml.hung (+ security.driver)
    assert '<div class="card critical" data-metric="critical"><div class="n">%d</div>' % critical in page.replace("\n", "")
    assert 'class="cell critical" data-finding="driver.known_bad"' in page
    assert 'Unreachable (1)</summary><p><a href="#node-gpu-gone">gpu-gone</a></p>' in page
    # the page's one script ran under its Content-Security-Policy (allowed by its hash): it shows the filter box
    box = page[page.index('<input class="filter"'):].split(">", 1)[0]
    assert 'id="filter"' in box and "hidden" not in box, box
    assert page.count("<script") == 1
    assert "upgrade the driver within its branch to 570.172.08" in page
    assert "collection %s" % GALAXY["version"] in page and "collection ?" not in page
    shot = os.path.join(str(tmp_path), "report.png")
    proc = subprocess.run([CHROMIUM] + flags + ["--screenshot=%s" % shot, "--window-size=1280,1400",
                                                "file://" + html_path],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and os.path.getsize(shot) > 10000, proc.stderr[-2000:]
    keep = os.environ.get("KUBEGPU_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


def test_cves_grouped_in_every_format(ansible, tmp_path):
    """security.* findings (here attached to gpu-bad from the cluster side) reach every report format
    grouped by CVE: JSON, Markdown, HTML in Chromium, and metrics that promtool accepts."""
    _res, report_dir = run_audit(ansible, tmp_path, cluster_findings=security_findings("gpu-bad"))
    report = json.load(open(os.path.join(report_dir, "kubegpu-audit.json")))
    cves = dict((c["id"], c) for c in report["cves"])
    assert cves["CVE-2025-23266"]["node_names"] == ["gpu-bad"] and cves["CVE-2025-23266"]["max_cvss"] == 9.0
    assert cves["CVE-2024-0132"]["components"] == ["gpu-operator"] and cves["CVE-2024-0132"]["fixed"] == {
        "gpu-operator": ["24.6.2"]}
    md = open(os.path.join(report_dir, "kubegpu-audit.md")).read()
    assert "## CVEs across the fleet" in md and "| CVE-2025-23266 | 9.0 | critical | container-toolkit | 1: gpu-bad" in md
    prom = os.path.join(report_dir, "kubegpu_audit.prom")
    text = open(prom).read()
    assert 'kubegpu_cve_affected_nodes{cve="CVE-2025-23266",component="container-toolkit",severity="critical"} 1' in text
    if PROMTOOL:
        with open(prom, "rb") as f:
            proc = subprocess.run([PROMTOOL, "check", "metrics"], stdin=f, capture_output=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    if CHROMIUM:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--user-data-dir=%s" % (tmp_path / "chrome-profile")]
        dom = subprocess.run([CHROMIUM] + flags + ["--dump-dom", "file://" + os.path.join(report_dir, "kubegpu-audit.html")],
                             capture_output=True, text=True, timeout=120, check=False)
        assert dom.returncode == 0, dom.stderr[-2000:]
        page = dom.stdout
        assert page.index('id="summary"') < page.index('id="cves"') < page.index('id="matrix"')
        assert '<tr class="fi" data-cve="CVE-2025-23266" data-affected-nodes="1">' in page
        # the GPU Operator is the cluster's: listed once with its node, not in the node x finding matrix
        cluster = page[page.index('<section id="cluster">'):page.index('<section id="cves">')]
        assert 'data-finding="security.gpu-operator"' in cluster and 'affected nodes (1)' in cluster
        matrix = page[page.index('<section id="matrix">'):page.index('<section id="details">')]
        assert "security.gpu-operator" not in matrix
