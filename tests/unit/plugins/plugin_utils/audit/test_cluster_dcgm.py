# -*- coding: utf-8 -*-
"""DCGM and DCGM Exporter versions from the cluster (GPU Operator or standalone DaemonSet pods),
evaluated against the bundled catalog: security.dcgm / security.dcgm-exporter from the API view."""
import datetime
import os

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import cluster_view as cl
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.rules import catalog as fs

NOW = datetime.datetime(2026, 11, 27, 3, 0, tzinfo=datetime.timezone.utc)
CATALOG = catalog_load.load_catalog(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "catalog", "v2"))
EXPORTER = "nvcr.io/nvidia/k8s/dcgm-exporter:%s"
ENGINE = "nvcr.io/nvidia/cloud-native/dcgm:%s"


def node(name):
    return {"metadata": {"name": name, "uid": "n-" + name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name, node_name, image, ns="gpu-operator", phase="Running", owner=None):
    p = {"metadata": {"name": name, "namespace": ns, "uid": "u-" + name},
         "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": image}]}, "status": {"phase": phase}}
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": owner, "controller": True}]
    return p


@pytest.mark.parametrize("tag, versions", [
    ("4.2.3-4.1.3-ubuntu22.04", ("4.2.3", "4.1.3")),
    ("3.3.9-3.6.1-ubuntu22.04", ("3.3.9", "3.6.1")),
    ("4.5.2-4.8.1-distroless", ("4.5.2", "4.8.1")),
    ("4.4.1-4.5.2", ("4.4.1", "4.5.2")),
    ("latest", (None, None)),
    ("4.8.1", (None, None)),  # one version: which one it is is not known
])
def test_exporter_tag_names_dcgm_and_exporter_versions(tag, versions):
    assert cl.dcgm_exporter_versions(EXPORTER % tag) == versions
    assert cl.dcgm_exporter_versions("nvcr.io/nvidia/k8s/dcgm-exporter@sha256:" + "a" * 64) == (None, None)


def test_exporter_pod_gives_both_components_and_a_standalone_hostengine_wins_for_dcgm():
    pods = [pod("exp-a", "gpu-a", EXPORTER % "4.5.2-4.8.1-ubuntu22.04", owner="nvidia-dcgm-exporter"),
            pod("exp-b", "gpu-b", EXPORTER % "4.5.2-4.8.1-ubuntu22.04", ns="monitoring", owner="dcgm-exporter"),
            pod("eng-b", "gpu-b", ENGINE % "4.5.3-1-ubuntu22.04", owner="nvidia-dcgm")]
    view = cl.cluster_view([node("gpu-a"), node("gpu-b")], pods, now=NOW)
    a, b = (view["nodes"][n]["components"] for n in ("gpu-a", "gpu-b"))
    assert a["dcgm-exporter"] == {"version": "4.8.1", "image": EXPORTER % "4.5.2-4.8.1-ubuntu22.04",
                                  "pod": "gpu-operator/exp-a"}
    assert a["dcgm"] == {"version": "4.5.2", "image": EXPORTER % "4.5.2-4.8.1-ubuntu22.04",
                         "source": "dcgm-exporter", "pod": "gpu-operator/exp-a"}
    assert b["dcgm"] == {"version": "4.5.3", "image": ENGINE % "4.5.3-1-ubuntu22.04", "source": "dcgm",
                         "pod": "gpu-operator/eng-b"}
    assert b["dcgm-exporter"]["version"] == "4.8.1" and b["dcgm-exporter"]["pod"] == "monitoring/exp-b"
    assert view["components"]["dcgm-exporter"]["nodes"] == 2

    found_a = dict((f["id"], f) for f in fs.rule_catalog({"catalog": CATALOG, "api": view["nodes"]["gpu-a"]}))
    assert sorted(found_a) == ["security.dcgm", "security.dcgm-exporter"]
    assert found_a["security.dcgm"]["evidence"]["version"] == "4.5.2"
    assert found_a["security.dcgm-exporter"]["evidence"]["cves"] == ["CVE-2026-47483"]
    found_b = [f["id"] for f in fs.rule_catalog({"catalog": CATALOG, "api": view["nodes"]["gpu-b"]})]
    assert found_b == ["security.dcgm-exporter"]  # its hostengine 4.5.3 is fixed


def test_fixed_exporter_gives_no_finding():
    view = cl.cluster_view([node("gpu-a")], [pod("exp", "gpu-a", EXPORTER % "4.5.3-4.8.2-ubuntu22.04")], now=NOW)
    assert view["nodes"]["gpu-a"]["components"]["dcgm-exporter"]["version"] == "4.8.2"
    assert fs.rule_catalog({"catalog": CATALOG, "api": view["nodes"]["gpu-a"]}) == []
