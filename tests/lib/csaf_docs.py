# -*- coding: utf-8 -*-
"""CSAF 2.0 documents written by this project in the shape of NVIDIA's bulletins, for tests.

Nothing here is copied from NVIDIA: advisory ids are 99xx, CVE ids CVE-2099-*, titles say
"Test bulletin". The shape is NVIDIA's (NVIDIA/product-security ``<year>/<id>/<id>.json``): a
``vendor`` branch, one ``architecture`` branch per platform and driver branch ("Linux(R570)",
"Linux(R570 vGPU 18)", "Linux(vGPU 19)", "Windows(R570)", "All(4.5)"), and ``product_version``
branches whose *name* is the product ("Tesla", "Guest driver", "NVIDIA Container Toolkit") and
whose ``product.name`` is the version text ("All driver versions prior to 570.172.08",
"570.158.01(All versions prior to and including vGPU 18.3)"). The real documents are read only
by the regeneration test (``SHARED_CSAF``), never stored in the repository.
"""
from __future__ import absolute_import, division, print_function

import copy
import json
import os

from . import paths

# ../shared/reference/nvidia-csaf beside the checkout (CI clones main into a directory beside
# ../shared); absent under ansible-test's copy or a bare clone: the regeneration test skips.
SHARED_CSAF = os.path.join(os.path.dirname(os.path.realpath(paths.REPO)), "shared", "reference", "nvidia-csaf")

VECTORS = {
    7.8: "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H",
    5.5: "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:N/I:N/A:H",
    9.0: "CVSS:3.1/AV:A/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H",
    8.2: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:H",
}


def row(pid, product, version_text):
    """One product_version branch: the branch names the product, product.name the version text."""
    return {"category": "product_version", "name": product, "product": {"name": version_text, "product_id": pid}}


def arch(name, *rows):
    return {"category": "architecture", "name": name, "branches": list(rows)}


def vuln(cve, affected, fixed, score=7.8, summary="Test vulnerability.", cwe="CWE-20"):
    return {"cve": cve, "cwe": {"id": cwe, "name": "test"},
            "notes": [{"category": "summary", "title": "Summary", "text": summary}],
            "product_status": {"known_affected": list(affected), "fixed": list(fixed)},
            "scores": [{"products": list(affected), "cvss_v3": {"version": "3.1", "baseScore": score,
                                                                "vectorString": VECTORS[score]}}]}


def bulletin(aid, title, archs, vulns, revision="1.0.0", date="2099-01-15", initial=None):
    return {
        "document": {
            "category": "csaf_security_advisory", "csaf_version": "2.0", "lang": "en",
            "title": "Test bulletin: %s" % title,
            "publisher": {"name": "NVIDIA Product Security", "category": "vendor", "namespace": "https://www.nvidia.com"},
            "tracking": {"id": str(aid), "version": revision, "status": "final",
                         "initial_release_date": "%sT00:00:00Z" % (initial or date),
                         "current_release_date": "%sT00:00:00Z" % date,
                         "revision_history": [{"number": revision, "date": "%sT00:00:00Z" % date, "summary": "test"}]},
        },
        "product_tree": {"branches": [{"category": "vendor", "name": "NVIDIA", "branches": list(archs)}]},
        "vulnerabilities": list(vulns),
    }


def driver_bulletin(aid="9930", date="2099-04-30", revision="1.0.0"):
    """A GPU Display Driver bulletin: data-center (Tesla) R535/R570 rows, GeForce, Windows,
    Virtual GPU Manager, Cloud Gaming and vGPU guest-driver rows (one guest architecture names
    the branch, one only the vGPU release, as bulletin 5861 does). CVE-2099-0001 affects Tesla
    and guest rows, CVE-2099-0002 only the guest driver."""
    archs = [
        arch("Linux(R535)", row("t535_aff", "Tesla", "All driver versions prior to 535.247.01"),
             row("t535_fix", "Tesla", "535.247.01"),
             row("gf535_aff", "GeForce", "All driver versions prior to 535.247.01")),
        arch("Linux(R570)", row("t570_aff", "Tesla", "All driver versions prior to 570.133.07"),
             row("t570_fix", "Tesla", "570.133.07")),
        arch("Windows(R570)", row("w570_aff", "Tesla", "All driver versions prior to 572.83")),
        arch("Linux(R570 vGPU 18)", row("g570_aff", "Guest driver", "570.124.06(All versions prior to and including vGPU 18.0)"),
             row("g570_fix", "Guest driver", "570.133.20(vGPU 18.1)")),
        arch("Linux(vGPU 19)", row("g580_aff", "Guest driver", "580.82.07(All versions prior to and including vGPU 19.1)"),
             row("g580_fix", "Guest driver", "580.95.05(vGPU 19.2)")),
        arch("Linux(R570 Gaming)", row("cg_aff", "Guest driver", "570.124.06(All versions up to and including the Feb release)")),
        arch("Ubuntu(R570 vGPU 18)", row("vgm_aff", "Virtual GPU Manager", "570.124.03(All versions prior to and including vGPU 18.0)")),
    ]
    vulns = [
        vuln("CVE-2099-0001", ["t535_aff", "t570_aff", "gf535_aff", "w570_aff", "g570_aff", "cg_aff", "vgm_aff"],
             ["t535_fix", "t570_fix", "g570_fix"], score=7.8),
        vuln("CVE-2099-0002", ["g570_aff", "g580_aff"], ["g570_fix", "g580_fix"], score=5.5,
             summary="Guest driver only."),
    ]
    return bulletin(aid, "GPU Display Driver", archs, vulns, revision=revision, date=date)


def toolkit_bulletin(aid="9959", date="2099-08-12", revision="2.0.0"):
    """A Container Toolkit bulletin with the four components of bulletin 5659's shape, row
    qualifiers, and versions spelled "v1.17" and "v0.17.3"."""
    archs = [arch("All",
                  row("ctk_aff", "NVIDIA Container Toolkit",
                      "All versions up to and including 1.17.7 (CDI mode only for versions prior to 1.17.5)"),
                  row("ctk_fix", "NVIDIA Container Toolkit", "v1.17.8"),
                  row("op_aff", "NVIDIA GPU Operator", "All versions up to and including 25.3.1"),
                  row("op_fix", "NVIDIA GPU Operator", "25.3.2"),
                  row("dp_aff", "NVIDIA Kubernetes Device Plugin",
                      "All versions up to and including 0.17.2 (only when device-list-strategy is cdi-cri)"),
                  row("dp_fix", "NVIDIA Kubernetes Device Plugin", "v0.17.3"),
                  row("mm_aff", "NVIDIA MIG Manager", "All versions up to and including 0.12.1 (only when CDI is enabled)"),
                  row("mm_fix", "NVIDIA MIG Manager", "v0.12.2"))]
    vulns = [vuln("CVE-2099-0101", ["ctk_aff", "op_aff", "dp_aff", "mm_aff"], ["ctk_fix", "op_fix", "dp_fix", "mm_fix"],
                  score=9.0)]
    return bulletin(aid, "NVIDIA Container Toolkit", archs, vulns, revision=revision, date=date)


def later_driver_bulletin(aid="9931", date="2099-06-01"):
    """A later driver bulletin that lists CVE-2099-0001 again for another branch (R550), as
    bulletin 5520 lists CVE-2022-42265 that 5415 listed (R515, then R470)."""
    archs = [arch("Linux(R550)", row("t550_aff", "Tesla", "All driver versions prior to 550.163.01"),
                  row("t550_fix", "Tesla", "550.163.01"))]
    return bulletin(aid, "GPU Display Driver (later)", archs,
                    [vuln("CVE-2099-0001", ["t550_aff"], ["t550_fix"], score=7.8)], date=date)


def write(directory, doc):
    """``directory/<year>/<id>/<id>.json`` (NVIDIA's repository layout); returns the path."""
    tracking = doc["document"]["tracking"]
    aid = tracking["id"]
    sub = os.path.join(str(directory), tracking["initial_release_date"][:4], aid)
    os.makedirs(sub, exist_ok=True)
    path = os.path.join(sub, "%s.json" % aid)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    return path


def clone(doc):
    return copy.deepcopy(doc)


def json_bytes(doc):
    return json.dumps(doc).encode("utf-8")
