"""kubegpu.fleet.driver_guard through real ansible-playbook (action plugin + module).

Every test points the module at its own temp dirs: ``proc_path`` (no driver unless a test
writes one), ``package_root`` (a dpkg database with real .deb files installed by ``dpkg
--root``), ``driver_root`` (the fake NVML where a test needs GPU detection) and the pin paths.
The generated apt preferences are checked with the real apt against a local apt repository
built with dpkg-deb; the dnf excludes with the real dnf (Debian's dnf 4 package, when
installed) against a local rpm repository built with rpmbuild and createrepo_c.
"""
import fnmatch
import os
import shutil
import stat
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "fakes", "nvml"))

import fakenvml  # noqa: E402

HAVE_DPKG = all(shutil.which(b) for b in ("dpkg", "dpkg-deb", "dpkg-query"))
HAVE_APT = all(shutil.which(b) for b in ("apt-get", "apt-cache", "apt-ftparchive"))
HAVE_GCC = shutil.which("gcc") is not None
HAVE_DNF = all(shutil.which(b) for b in ("dnf", "rpmbuild", "createrepo_c"))
# tests/lib/ansible_runner.py sets ANSIBLE_CALLBACKS_ENABLED="", which ansible-core 2.19 reads as
# a callback named "" and aborts on; naming the stdout callback itself is a no-op there.
ENV = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json"}


# ------------------------------------------------------------------------------ helpers

def build_deb(outdir, name, version):
    src = os.path.join(outdir, "src-%s-%s" % (name, version))
    os.makedirs(os.path.join(src, "DEBIAN"))
    with open(os.path.join(src, "DEBIAN", "control"), "w") as f:
        f.write("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: t <t@example.invalid>\n"
                "Description: kubegpu test package\n" % (name, version))
    deb = os.path.join(outdir, "%s_%s_all.deb" % (name, version))
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", src, deb], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(src)
    return deb


def package_root(base, packages):
    """A dpkg root with ``packages`` [(name, version)] installed for real."""
    root = os.path.join(str(base), "pkgroot")
    admin = os.path.join(root, "var", "lib", "dpkg")
    for d in ("info", "updates", "triggers"):
        os.makedirs(os.path.join(admin, d))
    for f in ("status", "available"):
        open(os.path.join(admin, f), "w").close()
    debs = os.path.join(str(base), "debs")
    os.makedirs(debs, exist_ok=True)
    for name, version in packages:
        deb = build_deb(debs, name, version)
        subprocess.run(["dpkg", "--root=%s" % root, "--force-not-root", "--force-bad-path", "-i", deb],
                       check=True, stdout=subprocess.DEVNULL)
    return root


@pytest.fixture
def node(tmp_path):
    """Paths of an empty node: no driver, no packages, no GPUs."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (tmp_path / "driver").mkdir()
    empty_pkgs = package_root(tmp_path / "empty", []) if HAVE_DPKG else str(tmp_path)
    return {"proc_path": str(proc), "driver_root": str(tmp_path / "driver"),
            "package_root": empty_pkgs, "timeout": 3}


def run(ansible, node, args=None, env=None, **kw):
    a = dict(node)
    a.update(args or {})
    return ansible.module("driver_guard", a, env=dict(ENV, **(env or {})), **kw)


def ids(res):
    return [m["id"] for m in res["matches"]]


SEED = "driver-r570-mig-mixed-unschedulable"
CDMM = "driver-cdmm-grace-mig-gds"
H100 = ["NVIDIA H100 80GB HBM3"]


# ------------------------------------------------------------------------------ verdicts

@pytest.mark.parametrize("args, verdict, recommended, match", [
    ({"driver_version": "570.172.08", "mig_mixed": True, "mig_enabled": True}, "ok", None, []),
    ({"driver_version": "570.148.08", "mig_mixed": True, "mig_enabled": True}, "known_bad", "570.172.08",
     [SEED]),
    # named nowhere in the catalog: affected by ordering
    ({"driver_version": "570.153.02", "mig_mixed": True, "mig_enabled": True}, "known_bad", "570.172.08",
     [SEED]),
    ({"driver_version": "570.148.08", "mig_mixed": False, "mig_enabled": False}, "at_risk", "570.172.08",
     [SEED]),
    ({"driver_version": "575.57.08", "mig_mixed": True, "mig_enabled": True, "gpu_names": H100}, "known_bad",
     "580.65.06", [SEED]),
    # the v1 535/525 entries had no source and are gone; the toolkit/driver combination is a
    # container-toolkit entry now (security.*/defect.* findings), not a driver verdict
    ({"driver_version": "535.154.05", "mig_mixed": False, "mig_enabled": False, "gpu_names": H100},
     "ok", None, []),
    ({"driver_version": "550.54.15", "toolkit_version": "1.14.5", "mig_mixed": False,
      "mig_enabled": False, "gpu_names": H100}, "ok", None, []),
    # GPU model unknown (no probe here): the HGX B200 minimum is possibly affected -> at_risk
    ({"driver_version": "535.154.05", "mig_mixed": False, "mig_enabled": False}, "at_risk", None,
     ["driver-hgx-b200-minimum"]),
    ({"driver_version": "580.65.06", "gpu_names": ["NVIDIA GH200 480GB"], "mig_mixed": False,
      "mig_enabled": False}, "at_risk", None, [CDMM]),
])
def test_audit_verdicts(ansible, node, args, verdict, recommended, match):
    res = run(ansible, node, args)
    assert res["_rc"] == 0, res
    assert res["changed"] is False
    assert res["verdict"] == verdict
    assert res["recommended_version"] == recommended
    assert ids(res) == match
    assert res["node"]["driver_version_source"] == "option"
    assert res["catalog"]["bundled"] >= 4 and res["catalog"]["extra"] == 0
    assert all(m["kind"] == "defect" for m in res["matches"])
    # The bundled catalog travelled in _catalog and is summarised in the invocation.
    assert res["invocation"]["module_args"]["_catalog"].startswith("<bundled catalog v2 ")


def test_audit_575_names_no_fix_and_alternatives(ansible, node):
    res = run(ansible, node, {"driver_version": "575.57.08", "mig_mixed": True, "mig_enabled": True})
    rec = res["recommendation"]
    assert rec["same_branch_fix"] == "none" and rec["branch"] == 580
    assert [a["version"] for a in rec["alternatives"]] == ["570.172.08"]
    assert res["branch"] == 575
    assert "no fixed 575 release" in res["msg"] and "alternatives: 570.172.08" in res["msg"]


def test_absent_node_is_not_a_failure(ansible, node):
    res = run(ansible, node)
    assert res["_rc"] == 0 and not res.get("failed")
    assert res["verdict"] == "absent"
    assert res["driver_version"] is None and res["kernel_module_version"] is None
    assert res["detection"]["gpu_facts"] == "used"
    assert res["detection"]["probe"]["status"] == "absent"
    assert res["msg"] == "no NVIDIA driver found"


def test_enforce_absent_and_ok_pass(ansible, node):
    assert run(ansible, node, {"state": "enforce"})["_rc"] == 0
    res = run(ansible, node, {"state": "enforce", "driver_version": "570.172.08",
                              "mig_mixed": True, "mig_enabled": True})
    assert res["_rc"] == 0 and res["verdict"] == "ok"


# ------------------------------------------------------------------------------ enforce

def test_enforce_fails_on_known_bad_naming_entries_and_fix(ansible, node):
    res = run(ansible, node, {"state": "enforce", "driver_version": "570.148.08",
                              "mig_mixed": True, "mig_enabled": True})
    assert res["_rc"] != 0 and res["failed"] is True
    assert res["msg"].startswith("known-bad NVIDIA driver 570.148.08: %s (critical: " % SEED)
    assert "Recommended version: 570.172.08 (first fixed 570 release" in res["msg"]
    assert res["verdict"] == "known_bad" and res["recommended_version"] == "570.172.08"


def test_enforce_in_check_mode_still_fails(ansible, node):
    res = run(ansible, node, {"state": "enforce", "driver_version": "575.57.08",
                              "mig_mixed": True, "mig_enabled": True}, check=True)
    assert res["failed"] is True
    assert "Recommended version: 580.65.06" in res["msg"]
    assert "570.172.08 (older branch 570)" in res["msg"]


def test_enforce_passes_at_risk(ansible, node):
    res = run(ansible, node, {"state": "enforce", "driver_version": "570.148.08",
                              "mig_mixed": False, "mig_enabled": True})
    assert res["_rc"] == 0 and res["verdict"] == "at_risk"
    assert res["matches"][0]["conditions_not_met"] == ["mig_mixed"]


def test_enforce_without_driver_fix(ansible, node):
    res = run(ansible, node, {"state": "enforce", "driver_version": "580.95.05", "gpu_names": ["NVIDIA GB200"],
                              "mig_mixed": False, "mig_enabled": True})
    assert res["failed"] is True
    assert "No driver version fixes this" in res["msg"]


# ------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("args, needle", [
    ({"driver_version": "570.abc"}, "driver_version: cannot parse NVIDIA driver version '570.abc'"),
    ({"kernel_module_version": "latest"}, "kernel_module_version: cannot parse NVIDIA driver version 'latest'"),
    ({"toolkit_version": "1.x", "driver_version": "550.54.15"}, "toolkit_version: cannot parse version '1.x'"),
    ({"skip_entries": ["no-such-entry"]}, "skip_entries: unknown catalog id(s) 'no-such-entry'"),
    ({"state": "pinned", "pin_scope": "branch", "package_manager": "apt"},
     "pin_scope=branch needs the node's driver branch"),
])
def test_bad_values_fail_with_a_clear_message(ansible, node, args, needle):
    res = run(ansible, node, args)
    assert res["failed"] is True and res["_rc"] != 0
    assert needle in res["msg"]
    # A clean fail_json, not a crash (ansible 2.19 adds a placeholder "exception" to every failure).
    assert "Traceback" not in res["msg"] and "MODULE FAILURE" not in res["msg"]
    assert res.get("exception", "(traceback unavailable)") == "(traceback unavailable)"


def test_catalog_is_internal(ansible, node):
    res = run(ansible, node, {"_catalog": [{"schema_version": 2, "entries": []}]})
    assert res["failed"] is True and "_catalog is internal" in res["msg"]


# ------------------------------------------------------------------------------ catalog_extra

SITE_ENTRY = {
    "id": "site-570-86-ecc",
    "kind": "defect",
    "title": "ECC storms on our A100 fleet",
    "severity": "high",
    "affected": [{"branch": "570", "introduced": "570.86.15", "last_affected": "570.86.15", "fixed": "570.172.08"}],
    "conditions": {"gpu_model": "A100"},
    "remediation": "Upgrade to 570.172.08.",
    "sources": [{"url": "https://wiki.example.invalid/gpu/ecc-570", "verified": "2026-11-24"}],
}


def site_doc(*entries):
    return {"schema_version": 2, "component": "driver", "version_scheme": "driver",
            "entries": list(entries or [SITE_ENTRY])}


def test_catalog_extra_from_the_task(ansible, node):
    args = {"driver_version": "570.86.15", "mig_mixed": False, "mig_enabled": False,
            "gpu_names": ["NVIDIA A100-SXM4-80GB"], "catalog_extra": [site_doc()]}
    res = run(ansible, node, args)
    assert res["verdict"] == "known_bad"
    m = res["matches"][0]
    assert m["id"] == "site-570-86-ecc" and m["source"] == "catalog_extra"
    assert m["conditions_met"] == ["gpu_model"]
    assert res["catalog"]["extra"] == 1 and res["catalog"]["entries"] == res["catalog"]["bundled"] + 1
    assert res["recommended_version"] == "570.172.08"
    # Not an A100: the site entry does not apply.
    res = run(ansible, node, dict(args, gpu_names=["NVIDIA H100 80GB HBM3"]))
    assert res["verdict"] == "ok"
    assert "site-570-86-ecc" in [n["id"] for n in res["not_applicable"]]


def test_catalog_extra_from_a_play_variable_as_document(ansible, node):
    # One document (not a list) from a play variable; documents of other components are
    # validated with the bundled catalog and do not reach the driver verdict.
    ctk = {"schema_version": 2, "component": "container-toolkit", "version_scheme": "semver", "entries": [
        dict(SITE_ENTRY, id="site-ctk", affected=[{"introduced": "1.17.0", "fixed": "1.17.8"}], conditions={})]}
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"site_catalog": site_doc(), "site_ctk": ctk},
             "tasks": [{"name": "guard", "kubegpu.fleet.driver_guard": dict(
                 node, driver_version="570.86.15", mig_mixed=False, mig_enabled=False,
                 gpu_names=["NVIDIA A100 80GB PCIe"], catalog_extra="{{ [site_catalog, site_ctk] }}",
                 skip_entries=[SEED]), "register": "guard"}]}]
    out = ansible.playbook(play, env=ENV)
    res = out.task("guard")
    assert out.rc == 0
    assert [m["id"] for m in res["matches"]] == ["site-570-86-ecc"]
    assert res["catalog"]["skipped"] == [SEED]


@pytest.mark.parametrize("extra, needle", [
    ([site_doc(dict(SITE_ENTRY, affected=[{"branch": "570", "fixed": 570.172}]))],
     "affected/0/fixed: 570.172 is not of type 'string'"),
    ([site_doc(dict(SITE_ENTRY, id=SEED))], "already exists in the bundled catalog"),
    # an id of another bundled component clashes too (checked on the controller)
    ([site_doc(dict(SITE_ENTRY, id="ctk-cve-2025-23266"))], "id 'ctk-cve-2025-23266' already exists in the bundled catalog"),
    ([site_doc(dict(SITE_ENTRY, severity="urgent"))], "'urgent'"),
    ([site_doc(dict(SITE_ENTRY, affected=[{"branch": "570", "fixed": "575.1.1"}]))],
     "fixed 575.1.1 is not in branch 570"),
    ("570.86.15", "must be a catalog v2 document"),
    ([SITE_ENTRY], "not a catalog v2 document"),
    ([site_doc(SITE_ENTRY, SITE_ENTRY)], "duplicate entry id 'site-570-86-ecc'"),
])
def test_bad_catalog_extra_fails_clearly(ansible, node, extra, needle):
    res = run(ansible, node, {"driver_version": "570.86.15", "catalog_extra": extra})
    assert res["failed"] is True
    assert res["msg"].startswith("invalid catalog_extra: ")
    assert needle in res["msg"]


# ------------------------------------------------------------------------------ node detection

@pytest.mark.skipif(not HAVE_DPKG, reason="dpkg tools not installed")
def test_packages_reboot_pending_and_compute_utils(ansible, tmp_path, node):
    root = package_root(tmp_path, [("libnvidia-compute-570", "570.172.08-0ubuntu1"),
                                   ("nvidia-driver-570", "570.172.08-0ubuntu1"),
                                   ("nvidia-compute-utils-570", "570.148.08-0ubuntu1"),
                                   ("nvidia-container-toolkit", "1.17.8-1")])
    fakenvml.write_procfs(node["proc_path"], version="570.148.08")
    res = run(ansible, node, {"package_root": root, "mig_mixed": True, "mig_enabled": True,
                              "gpu_names": ["NVIDIA H100 80GB HBM3"]})
    assert res["_rc"] == 0
    assert res["driver_version"] == "570.172.08"
    assert res["node"]["driver_version_source"] == "package libnvidia-compute-570"
    assert res["kernel_module_version"] == "570.148.08"
    assert res["reboot_pending"] is True
    # The loaded module is the bad one: known_bad until the reboot.
    assert res["verdict"] == "known_bad"
    assert res["matches"][0]["matched_versions"][0]["components"] == ["kernel_module"]
    assert res["recommended_version"] == "570.172.08"
    assert "reboot to load it" in res["recommendation"]["reason"]
    assert [p["name"] for p in res["packages"]] == ["libnvidia-compute-570", "nvidia-compute-utils-570",
                                                    "nvidia-container-toolkit", "nvidia-driver-570"]
    cu = res["compute_utils"]
    assert cu["package"] == "nvidia-compute-utils-570" and cu["installed"] is True
    assert cu["matches_driver"] is False and cu["version"] == "570.148.08-0ubuntu1"
    assert res["node"]["toolkit_version"] == "1.17.8-1"
    assert res["package_manager"] == "dpkg" and res["package_query_error"] is None


def test_wrong_package_root_is_reported(ansible, node, tmp_path):
    res = run(ansible, node, {"package_root": str(tmp_path / "not-a-host"), "driver_version": "570.172.08",
                              "mig_mixed": False, "mig_enabled": False})
    assert res["_rc"] == 0
    assert res["package_query_error"] == "no dpkg or rpm database under %s" % (tmp_path / "not-a-host")
    assert any("installed NVIDIA packages unknown" in w for w in res.get("warnings", []))


@pytest.fixture(scope="module")
def fake_driver_148():
    if not HAVE_GCC:
        pytest.skip("gcc not installed")
    return fakenvml.build("570.148.08")


def test_detection_through_gpu_facts_mixed_mig(ansible, node, tmp_path, fake_driver_148):
    """No MIG options: gpu.nvidia_facts probes the (fake) NVML and finds a MIG-mixed node."""
    scenario = fakenvml.write_scenario(
        str(tmp_path / "nvml.json"),
        [fakenvml.gpu(0, profiles=["3g.40gb", "3g.40gb"]), fakenvml.gpu(1, mig=False)],
        driver_version="570.148.08", kernel_module_version="570.148.08", emulate_r570_mig_hang=False)
    fakenvml.write_procfs(node["proc_path"], version="570.148.08")
    res = run(ansible, dict(node, driver_root=fake_driver_148.root), {"backend": "nvml", "state": "enforce"},
              env={"KUBEGPU_FAKE_NVML_CONFIG": scenario})
    assert res["detection"]["gpu_facts"] == "used"
    assert res["detection"]["probe"]["status"] == "ok"
    assert res["node"]["mig_mixed"] is True and res["node"]["mig_enabled"] is True
    assert res["node"]["mig_source"] == "gpu_facts"
    assert res["node"]["gpu_names"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]
    assert res["kernel_module_version"] == "570.148.08"
    assert res["verdict"] == "known_bad" and res["failed"] is True
    assert SEED in res["msg"]


@pytest.mark.parametrize("procfs_mig, verdict", [(False, "at_risk"), (True, "known_bad")])
def test_detection_when_nvml_hangs(ansible, node, tmp_path, fake_driver_148, procfs_mig, verdict):
    """The R570 hang itself: nvmlInit never returns on the MIG-mixed node and the probe times out.

    Without other evidence the MIG state is unknown (at_risk). When procfs shows MIG instances
    on one GPU and none on the other, gpu_facts infers the mixed layout and the node is known_bad.
    """
    gpus = [fakenvml.gpu(0, profiles=["7g.80gb"]), fakenvml.gpu(1, mig=False)]
    scenario = fakenvml.write_scenario(str(tmp_path / "nvml.json"), gpus, driver_version="570.148.08",
                                       kernel_module_version="570.148.08")
    if procfs_mig:
        fakenvml.write_procfs(node["proc_path"], version="570.148.08", gpus=gpus, mig_instances={0: [(0, 0)]})
    else:
        fakenvml.write_procfs(node["proc_path"], version="570.148.08")
    res = run(ansible, dict(node, driver_root=fake_driver_148.root, timeout=2),
              {"backend": "nvml", "state": "audit"}, env={"KUBEGPU_FAKE_NVML_CONFIG": scenario})
    assert res["_rc"] == 0, res.get("msg")
    assert res["detection"]["probe"]["status"] == "hung"
    assert "GPU probe hung" in res["msg"]
    assert res["kernel_module_version"] == "570.148.08"
    assert res["verdict"] == verdict
    m = res["matches"][0]
    assert m["id"] == SEED
    if procfs_mig:
        assert res["node"]["mig_mixed"] is True and m["conditions_met"] == ["mig_mixed"]
    else:
        assert res["node"]["mig_mixed"] is None and m["conditions_unknown"] == ["mig_mixed"]


# ------------------------------------------------------------------------------ pinned: apt

def pin_args(tmp_path, **extra):
    d = tmp_path / "preferences.d"
    d.mkdir(exist_ok=True)
    args = {"state": "pinned", "package_manager": "apt",
            "apt_preferences_path": str(d / "kubegpu-fleet-nvidia-known-bad.pref"),
            "driver_version": "570.148.08", "mig_mixed": False, "mig_enabled": False}
    args.update(extra)
    return args


def test_pinned_apt_check_diff_write_idempotent_backup(ansible, node, tmp_path):
    args = pin_args(tmp_path)
    path = args["apt_preferences_path"]
    res = run(ansible, node, args, check=True, diff=True)
    assert res["_rc"] == 0 and res["changed"] is True
    assert not os.path.exists(path)
    after = res["diff"]["after"]
    assert res["diff"]["before"] == "" and res["diff"]["before_header"].endswith("(absent)")
    assert "Explanation: %s: R570 drivers" % SEED in after
    assert "(branch 570, >= 570.124.06, < 570.172.08)" in after and "(every 575 release" in after
    assert after.count("Pin-Priority: -1") == res["pins"]["count"]
    # driver defects only (570 range, 575 branch, 580 below its fix, the RTX PRO 6000 575 release
    # while the GPU model is unknown): never a security floor
    assert res["pins"]["entries"] == [SEED, "driver-rtx-pro-6000-575-no-mig"]
    assert res["pins"]["validation"] == "apt-cache policy parsed the file"
    assert res["verdict"] == "at_risk"  # pinned still reports

    res = run(ansible, node, args, diff=True)
    assert res["changed"] is True and res["pins"]["backup_file"] is None
    with open(path) as f:
        assert f.read() == after
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644

    res = run(ansible, node, args, diff=True)
    assert res["changed"] is False and res["diff"]["before"] == res["diff"]["after"]
    res = run(ansible, node, args, check=True)
    assert res["changed"] is False

    # A hand edit is put back, and the edited file is kept as a 0600 backup.
    with open(path, "a") as f:
        f.write("\n# local edit\n")
    res = run(ansible, node, args)
    assert res["changed"] is True
    backup = res["pins"]["backup_file"]
    assert backup and stat.S_IMODE(os.stat(backup).st_mode) == 0o600
    with open(backup) as f:
        assert f.read().endswith("# local edit\n")
    with open(path) as f:
        assert f.read() == after


def test_pinned_branch_scope_and_skip(ansible, node, tmp_path):
    res = run(ansible, node, pin_args(tmp_path, pin_scope="branch"), check=True, diff=True)
    assert res["pins"]["scope"] == "branch" and res["pins"]["count"] == 1
    assert "575" not in res["diff"]["after"].split("Explanation", 1)[1]
    res = run(ansible, node, pin_args(tmp_path, skip_entries=[SEED], gpu_names=["NVIDIA H100 80GB HBM3"]),
              check=True)
    assert res["pins"]["entries"] == [] and res["pins"]["count"] == 0


def test_pinned_apt_rejects_ignored_file_name(ansible, node, tmp_path):
    res = run(ansible, node, pin_args(tmp_path, apt_preferences_path=str(tmp_path / "pins.conf")))
    assert res["failed"] is True and "apt ignores preference files" in res["msg"]
    res = run(ansible, node, pin_args(tmp_path, apt_preferences_path=str(tmp_path / "nodir" / "x.pref")))
    assert res["failed"] is True and "does not exist" in res["msg"]
    res = run(ansible, node, pin_args(tmp_path, pin_packages=["/nvidia/"]))
    assert res["failed"] is True and "pin_packages: '/nvidia/'" in res["msg"]


APT_REPO_PACKAGES = [
    ("libnvidia-compute-570", "570.86.15-0ubuntu1"),
    ("libnvidia-compute-570", "570.148.08-0ubuntu1"),
    ("libnvidia-compute-570", "570.158.01-0ubuntu1"),
    ("libnvidia-compute-570", "570.172.08-0ubuntu1"),
    ("libnvidia-decode-570", "570.86.15-0ubuntu1"),
    ("libnvidia-decode-570", "570.158.01-0ubuntu1"),
    ("nvidia-driver-575", "575.57.08-0ubuntu1"),
    ("libnvidia-compute-535", "535.154.05-0ubuntu1"),
    ("libnvidia-compute-535", "535.183.06-0ubuntu1"),
    ("cuda-drivers-570", "570.148.08-1"),
    ("zzz-unrelated", "575.1-1"),
]


@pytest.fixture
def apt_repo(tmp_path):
    """A local flat apt repository plus an apt configuration that touches nothing of the host."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name, version in APT_REPO_PACKAGES:
        build_deb(str(repo), name, version)
    with open(str(repo / "Packages"), "w") as f:
        subprocess.run(["apt-ftparchive", "packages", "."], cwd=str(repo), check=True, stdout=f)
    state = tmp_path / "apt-state"
    (state / "lists" / "partial").mkdir(parents=True)
    (tmp_path / "apt-cache" / "archives" / "partial").mkdir(parents=True)
    (state / "status").write_text("")
    (tmp_path / "sources.list").write_text("deb [trusted=yes] file:%s ./\n" % repo)
    (tmp_path / "no-parts").mkdir()
    prefs = tmp_path / "preferences.d"
    prefs.mkdir()
    opts = ["-o", "Dir::State=%s" % state, "-o", "Dir::State::status=%s" % (state / "status"),
            "-o", "Dir::Cache=%s" % (tmp_path / "apt-cache"),
            "-o", "Dir::Etc::SourceList=%s" % (tmp_path / "sources.list"),
            "-o", "Dir::Etc::SourceParts=%s" % (tmp_path / "no-parts"),
            "-o", "Dir::Etc::Preferences=%s" % (tmp_path / "no-preferences"),
            "-o", "Dir::Etc::PreferencesParts=%s" % prefs,
            "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root"]
    subprocess.run(["apt-get"] + opts + ["update"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)

    def apt(tool, *args):
        return subprocess.run([tool] + opts + list(args), check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, env=dict(os.environ, LC_ALL="C"))
    return {"prefs": str(prefs), "apt": apt}


def policy(apt, pkg):
    """{"candidate": str, "versions": {version: priority}} from apt-cache policy."""
    out = apt("apt-cache", "policy", pkg)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr
    cand, versions = None, {}
    for line in out.stdout.splitlines():
        s = line.strip().lstrip("* ").strip()
        if s.startswith("Candidate:"):
            cand = s.split(":", 1)[1].strip()
        parts = s.split()
        if len(parts) == 2 and parts[0][0].isdigit() and parts[1].lstrip("-").isdigit():
            versions[parts[0]] = int(parts[1])
    return {"candidate": cand, "versions": versions}


@pytest.mark.skipif(not (HAVE_APT and HAVE_DPKG), reason="apt/dpkg tools not installed")
def test_real_apt_refuses_pinned_versions(ansible, node, apt_repo):
    apt = apt_repo["apt"]
    # Without pins apt would pick the newest, known-bad versions.
    assert policy(apt, "libnvidia-decode-570")["candidate"] == "570.158.01-0ubuntu1"
    assert policy(apt, "nvidia-driver-575")["candidate"] == "575.57.08-0ubuntu1"

    path = os.path.join(apt_repo["prefs"], "kubegpu-fleet-nvidia-known-bad.pref")
    res = run(ansible, node, {"state": "pinned", "package_manager": "apt", "apt_preferences_path": path,
                              "driver_version": "570.148.08", "mig_mixed": True, "mig_enabled": True})
    assert res["_rc"] == 0 and res["changed"] is True

    p570 = policy(apt, "libnvidia-compute-570")
    assert p570["candidate"] == "570.172.08-0ubuntu1"
    assert p570["versions"]["570.148.08-0ubuntu1"] == -1
    assert p570["versions"]["570.158.01-0ubuntu1"] == -1
    assert p570["versions"]["570.86.15-0ubuntu1"] == 500
    assert p570["versions"]["570.172.08-0ubuntu1"] == 500
    # Newest release in the repo is bad: apt falls back to the older good one.
    assert policy(apt, "libnvidia-decode-570")["candidate"] == "570.86.15-0ubuntu1"
    # The whole 575 branch has no fix: nothing is installable.
    p575 = policy(apt, "nvidia-driver-575")
    assert p575["candidate"] == "(none)" and p575["versions"]["575.57.08-0ubuntu1"] == -1
    assert policy(apt, "libnvidia-compute-535")["candidate"] == "535.183.06-0ubuntu1"
    assert policy(apt, "cuda-drivers-570")["versions"]["570.148.08-1"] == -1
    # A non-NVIDIA package with a 575.x version is untouched.
    assert policy(apt, "zzz-unrelated")["versions"]["575.1-1"] == 500

    sim = apt("apt-get", "install", "--simulate", "nvidia-driver-575")
    assert sim.returncode != 0 and "has no installation candidate" in sim.stderr
    sim = apt("apt-get", "install", "--simulate", "libnvidia-compute-570", "libnvidia-decode-570")
    assert sim.returncode == 0, sim.stderr
    assert "Inst libnvidia-compute-570 (570.172.08-0ubuntu1" in sim.stdout
    assert "Inst libnvidia-decode-570 (570.86.15-0ubuntu1" in sim.stdout


# ------------------------------------------------------------------------------ pinned: dnf

DNF_CONF = "[main]\ngpgcheck=1\ninstallonly_limit=3\nexclude=kernel*\nbest=True\n"


def test_pinned_dnf_keeps_user_excludes_and_is_idempotent(ansible, node, tmp_path):
    conf = tmp_path / "dnf.conf"
    conf.write_text(DNF_CONF)
    os.chmod(str(conf), 0o640)
    args = {"state": "pinned", "package_manager": "dnf", "dnf_conf_path": str(conf),
            "driver_version": "570.148.08", "mig_mixed": False, "mig_enabled": False,
            "pin_packages": ["*nvidia*", "cuda-drivers*"]}
    res = run(ansible, node, args, check=True, diff=True)
    assert res["changed"] is True and conf.read_text() == DNF_CONF
    after = res["diff"]["after"]
    line = [l for l in after.splitlines() if l.startswith("exclude=")][0]
    toks = line[len("exclude="):].split(",")
    assert toks[0] == "kernel*"
    assert "*nvidia*-570.124.0[6-9]-*" in toks and "cuda-drivers*-575.*-*" in toks
    # 580 below its fix is excluded, 580.65.06 itself is not
    assert "*nvidia*-580.65.0[0-5]-*" in toks
    assert not [t for t in toks if fnmatch.fnmatchcase("nvidia-driver-580.65.06-1.el9", t)]

    res = run(ansible, node, args, diff=True)
    assert res["changed"] is True and conf.read_text() == after
    assert stat.S_IMODE(os.stat(str(conf)).st_mode) == 0o640
    backup = res["pins"]["backup_file"]
    with open(backup) as f:
        assert f.read() == DNF_CONF
    assert stat.S_IMODE(os.stat(backup).st_mode) == 0o600

    res = run(ansible, node, args)
    assert res["changed"] is False

    # Skipping every pinnable entry removes exactly our tokens again.
    res = run(ansible, node, dict(args, skip_entries=[SEED, "driver-rtx-pro-6000-575-no-mig"]))
    assert res["changed"] is True and conf.read_text() == DNF_CONF


DNF_REPO_PACKAGES = [
    # name, epoch, version, release (NVIDIA's RHEL packages carry epoch 3)
    ("nvidia-driver", "3", "570.86.15", "1.el9"),
    ("nvidia-driver", "3", "570.148.08", "1.el9"),
    ("nvidia-driver", "3", "570.158.01", "1.el9"),
    ("nvidia-driver", "3", "570.172.08", "1.el9"),
    ("nvidia-driver", "3", "575.57.08", "1.el9"),
    ("nvidia-driver", "3", "535.154.05", "1.el9"),
    ("nvidia-driver", "3", "535.183.06", "1.el9"),
    ("kmod-nvidia-latest-dkms", "3", "570.148.08", "1.el9"),
    ("cuda-drivers", None, "570.148.08", "1"),
    ("cuda-drivers", None, "570.172.08", "1"),
    ("zzz-unrelated", None, "575.1", "1"),
]


@pytest.fixture
def dnf_repo(tmp_path):
    """A local rpm repository and a dnf invocation confined to temp dirs."""
    top = tmp_path / "rpmbuild"
    (top / "SPECS").mkdir(parents=True)
    repo = tmp_path / "rpmrepo"
    repo.mkdir()
    for name, epoch, version, release in DNF_REPO_PACKAGES:
        spec = top / "SPECS" / ("%s-%s.spec" % (name, version))
        spec.write_text("Name: %s\n%sVersion: %s\nRelease: %s\nSummary: test\nLicense: GPL\n"
                        "BuildArch: noarch\n%%description\ntest\n%%files\n"
                        % (name, "Epoch: %s\n" % epoch if epoch else "", version, release))
        subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", "_topdir %s" % top,
                        "--define", "_rpmdir %s" % repo, str(spec)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["createrepo_c", "-q", str(repo)], check=True)
    (tmp_path / "repos.d").mkdir()
    (tmp_path / "repos.d" / "local.repo").write_text(
        "[local]\nname=local\nbaseurl=file://%s\ngpgcheck=0\nenabled=1\n" % repo)
    conf = tmp_path / "dnf.conf"
    conf.write_text("[main]\ngpgcheck=1\nexclude=kernel*\n")
    base = ["dnf", "-c", str(conf), "--installroot=%s" % (tmp_path / "dnfroot"),
            "--setopt=reposdir=%s" % (tmp_path / "repos.d"), "--setopt=cachedir=%s" % (tmp_path / "dnfcache"),
            "--releasever=9", "--setopt=install_weak_deps=0"]

    def dnf(*args):
        return subprocess.run(base + list(args), check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, env=dict(os.environ, LC_ALL="C"))
    return {"conf": str(conf), "dnf": dnf}


def available(dnf):
    out = dnf("-q", "list", "--showduplicates", "--available")
    assert out.returncode == 0, out.stdout
    rows = [l.split() for l in out.stdout.splitlines() if l.strip() and not l.startswith("Available")]
    return sorted((r[0].rsplit(".", 1)[0], r[1]) for r in rows if len(r) >= 2)


@pytest.mark.skipif(not HAVE_DNF, reason="dnf, rpmbuild or createrepo_c not installed")
def test_real_dnf_honours_the_excludes(ansible, node, dnf_repo):
    dnf = dnf_repo["dnf"]
    assert ("nvidia-driver", "3:575.57.08-1.el9") in available(dnf)
    res = run(ansible, node, {"state": "pinned", "package_manager": "dnf", "dnf_conf_path": dnf_repo["conf"],
                              "driver_version": "570.148.08", "mig_mixed": False, "mig_enabled": False})
    assert res["_rc"] == 0 and res["changed"] is True
    assert available(dnf) == [
        ("cuda-drivers", "570.172.08-1"),
        ("nvidia-driver", "3:535.154.05-1.el9"),
        ("nvidia-driver", "3:535.183.06-1.el9"),
        ("nvidia-driver", "3:570.172.08-1.el9"),
        ("nvidia-driver", "3:570.86.15-1.el9"),
        ("zzz-unrelated", "575.1-1"),
    ]
    # Unlike apt pins, excludes also stop explicit versions.
    out = dnf("install", "--assumeno", "nvidia-driver-3:570.148.08-1.el9")
    assert out.returncode != 0 and "Unable to find a match: nvidia-driver-3:570.148.08-1.el9" in out.stdout
    out = dnf("install", "--assumeno", "nvidia-driver", "cuda-drivers")
    assert "3:570.172.08-1.el9" in out.stdout and "575.57.08" not in out.stdout
    # The user's own exclude is still in force.
    with open(dnf_repo["conf"]) as f:
        assert [l for l in f.read().splitlines() if l.startswith("exclude=")][0].startswith("exclude=kernel*,")


def test_module_defaults_action_group(ansible, node, tmp_path):
    """group/kubegpu.fleet.node module_defaults reach driver_guard through its action plugin."""
    host = tmp_path / "host"
    fakenvml.write_procfs(str(host / "proc"), version="535.154.05")
    (host / "dev").mkdir()
    play = [{"hosts": "localhost", "gather_facts": False,
             "module_defaults": {"group/kubegpu.fleet.node": {
                 "proc_path": str(host / "proc"), "dev_path": str(host / "dev"),
                 "driver_root": node["driver_root"]}},
             "tasks": [{"name": "guard", "kubegpu.fleet.driver_guard": {
                 "package_root": node["package_root"], "mig_mixed": False, "mig_enabled": False,
                 "timeout": 2}}]}]
    out = ansible.playbook(play, env=ENV)
    res = out.task("guard")
    assert out.rc == 0, res
    assert res["kernel_module_version"] == "535.154.05"
    assert res["node"]["kernel_module_version_source"] == str(host / "proc" / "driver" / "nvidia" / "version")
    # the v1 535 entry named a release that does not exist and is gone; with the GPU model
    # unknown the HGX B200 driver minimum (570.133.20) is possibly affected: at_risk, no driver fix
    assert res["verdict"] == "at_risk" and res["recommended_version"] is None
    assert [m["id"] for m in res["matches"]] == ["driver-hgx-b200-minimum"]


def _python38():
    import glob
    for py in sorted(glob.glob("/root/.pyenv/versions/3.8*/bin/python3.8")) + ["/usr/bin/python3.8"]:
        if os.access(py, os.X_OK):
            return py
    return None


@pytest.mark.skipif(_python38() is None, reason="no Python 3.8 on this machine")
def test_runs_on_a_python38_node(ansible, node, tmp_path):
    """Node-side code is Python 3.8: the same evaluation and pins on a 3.8 interpreter."""
    args = pin_args(tmp_path, driver_version="575.57.08", mig_mixed=True, mig_enabled=True)
    extra = {"vars": {"ansible_python_interpreter": _python38()}}
    res = ansible.module("driver_guard", dict(node, **args), check=True, diff=True, env=ENV, task_extra=extra)
    ref = run(ansible, node, args, check=True, diff=True)
    assert res["_rc"] == 0, res.get("msg")
    for key in ("verdict", "recommended_version", "recommendation", "matches", "not_applicable", "pins"):
        assert res[key] == ref[key], key
    assert res["diff"]["after"] == ref["diff"]["after"]
