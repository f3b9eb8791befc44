"""The API double's DaemonSet controller follows a node's labels after the fact, as the real one
does (pkg/controller/daemon: a pod on a node whose labels stop matching the DaemonSet's
nodeSelector is deleted; it is created again once they match). The GPU Operator stops and
restarts its operands on one node this way (nvidia.com/gpu.deploy.<component>), and so does
kubegpu.fleet.gpu_operands."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(REPO, "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from kubegpu_lab.apidouble import resources  # noqa: E402
from kubegpu_lab.apidouble.store import Context, Store  # noqa: E402

from test_api_double import node  # noqa: E402

LABEL = "nvidia.com/gpu.deploy.device-plugin"


def operand_ds(name, label):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "gpu-operator"},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"nodeSelector": {label: "true"},
                                           "containers": [{"name": "c", "image": "nvcr.io/nvidia/" + name}]}}}}


def test_relabelled_node_loses_the_daemon_pod_and_gets_a_new_one_back(tmp_path):
    store = Store(str(tmp_path / "s"))
    pods = resources.find("", "v1", "pods")
    nodes = resources.find("", "v1", "nodes")
    try:
        store.load_objects([node("gpu-0", labels={LABEL: "true"}), node("gpu-1", labels={LABEL: "true"}),
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
                            operand_ds("nvidia-device-plugin-daemonset", LABEL)])

        def on(name):
            return [p for p in store.list(pods, "gpu-operator")["items"] if p["spec"]["nodeName"] == name]

        first = on("gpu-0")
        assert len(first) == 1 and len(on("gpu-1")) == 1
        ctx = Context(actor="api")
        store.patch(ctx, nodes, None, "gpu-0", "merge", {"metadata": {"labels": {LABEL: "paused-for-gpu-reset"}}})
        assert on("gpu-0") == [] and len(on("gpu-1")) == 1     # only the relabelled node loses its pod
        deleted = [e for e in store.history_since(0) if e["verb"] == "delete" and e["resource"] == "pods"]
        assert [(e["actor"], e["name"]) for e in deleted] == [("controller/daemonset", first[0]["metadata"]["name"])]
        store.patch(ctx, nodes, None, "gpu-0", "merge", {"metadata": {"labels": {LABEL: "true"}}})
        back = on("gpu-0")
        assert len(back) == 1 and back[0]["metadata"]["name"] != first[0]["metadata"]["name"]
        assert back[0]["status"]["phase"] == "Running"
        # removing the label stops it as well; a label the selector does not name changes nothing
        store.patch(ctx, nodes, None, "gpu-0", "merge", {"metadata": {"labels": {LABEL: None}}})
        assert on("gpu-0") == []
        store.patch(ctx, nodes, None, "gpu-1", "merge", {"metadata": {"labels": {"other": "x"}}})
        assert len(on("gpu-1")) == 1
    finally:
        store.close()
