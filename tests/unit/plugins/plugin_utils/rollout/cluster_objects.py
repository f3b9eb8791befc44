"""Kubernetes objects as the API returns them, for the rollout tests: GPU nodes, a fleet of them, pods."""


def node(name, gpus=2, cordoned=False, ready="True", labels=None, label_gpu=True, mig=None):
    lab = dict(labels or {})
    if label_gpu:
        lab["nvidia.com/gpu.present"] = "true"
    alloc = {"cpu": "31", "memory": "60Gi"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    alloc.update(mig or {})
    obj = {"metadata": {"name": name, "labels": lab},
           "spec": {},
           "status": {"allocatable": alloc, "capacity": dict(alloc),
                      "conditions": [{"type": "Ready", "status": ready}],
                      "nodeInfo": {"bootID": "boot-%s" % name}}}
    if cordoned:
        obj["spec"]["unschedulable"] = True
    return obj


def fleet(n=6, **special):
    return [node("n%d" % i, **special.get("n%d" % i, {})) for i in range(n)]


def pod(name, ns="ml", owner="ReplicaSet", deleting=False, phase="Running", labels=None, mirror=False):
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T05:00:00Z"
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": phase}}
