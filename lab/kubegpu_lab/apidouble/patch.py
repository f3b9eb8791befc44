"""PATCH bodies: RFC 6902 JSON patch, RFC 7386 merge patch and Kubernetes strategic merge patch.

The strategic merge patch follows k8s.io/apimachinery/pkg/util/strategicpatch for the fields
the double's resource types carry: lists with a ``patchMergeKey`` are merged element by element
(containers and env by ``name``, conditions by ``type``...), primitive lists with the ``merge``
strategy are unions, every other list is replaced. The directives ``$patch`` (replace, delete,
merge), ``$retainKeys``, ``$deleteFromPrimitiveList/<f>`` and ``$setElementOrder/<f>`` work.
"""
import copy

from .errors import ApiError

# Patch strategies relative to a PodSpec: path -> merge key ("" = merge primitive list).
_POD_SPEC = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "containers[].env": "name",
    "initContainers[].env": "name",
    "containers[].ports": "containerPort",
    "initContainers[].ports": "containerPort",
    "containers[].volumeMounts": "mountPath",
    "initContainers[].volumeMounts": "mountPath",
    "containers[].volumeDevices": "devicePath",
    "initContainers[].volumeDevices": "devicePath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
_METADATA = {
    "finalizers": "",
    "ownerReferences": "uid",
}
_TEMPLATE_KINDS = ("DaemonSet", "Deployment", "ReplicaSet", "StatefulSet")


def _strategies(kind):
    table = {}
    for path, key in _METADATA.items():
        table["metadata." + path] = key
    if kind == "Pod":
        for path, key in _POD_SPEC.items():
            table["spec." + path] = key
        table["status.conditions"] = "type"
        table["status.podIPs"] = "ip"
        table["status.hostIPs"] = "ip"
    elif kind in _TEMPLATE_KINDS:
        for path, key in _POD_SPEC.items():
            table["spec.template.spec." + path] = key
        for path, key in _METADATA.items():
            table["spec.template.metadata." + path] = key
        table["status.conditions"] = "type"
    elif kind == "Node":
        table["spec.podCIDRs"] = ""
        table["status.conditions"] = "type"
        table["status.addresses"] = "type"
    elif kind == "PodDisruptionBudget":
        table["status.conditions"] = "type"
    elif kind == "Namespace":
        table["status.conditions"] = "type"
    return table


# --- JSON patch (RFC 6902) ------------------------------------------------------------------

def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("JSON pointer %r does not start with '/'" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts, create=False):
    cur = doc
    for part in parts:
        if isinstance(cur, dict):
            if part not in cur:
                raise ValueError("missing path element %r" % part)
            cur = cur[part]
        elif isinstance(cur, list):
            cur = cur[_index(cur, part, False)]
        else:
            raise ValueError("cannot descend into %r at %r" % (type(cur).__name__, part))
    return cur


def _index(lst, part, allow_end):
    if part == "-" and allow_end:
        return len(lst)
    try:
        idx = int(part)
    except ValueError:
        raise ValueError("invalid array index %r" % part)
    limit = len(lst) if allow_end else len(lst) - 1
    if idx < 0 or idx > limit:
        raise ValueError("array index %d out of bounds" % idx)
    return idx


def _add(doc, parts, value):
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, True), value)
    else:
        raise ValueError("cannot add to a %s" % type(parent).__name__)
    return doc


def _remove(doc, parts):
    if not parts:
        raise ValueError("cannot remove the whole document")
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise ValueError("unable to remove nonexistent key: %s" % last)
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, False))
    raise ValueError("cannot remove from a %s" % type(parent).__name__)


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise ApiError(400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    try:
        for op in ops:
            kind = op.get("op")
            parts = _pointer(op.get("path", ""))
            if kind == "add":
                doc = _add(doc, parts, copy.deepcopy(op["value"]))
            elif kind == "remove":
                _remove(doc, parts)
            elif kind == "replace":
                _walk(doc, parts)
                if not parts:
                    doc = copy.deepcopy(op["value"])
                else:
                    _remove(doc, parts)
                    doc = _add(doc, parts, copy.deepcopy(op["value"]))
            elif kind == "move":
                value = _remove(doc, _pointer(op["from"]))
                doc = _add(doc, parts, value)
            elif kind == "copy":
                value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
                doc = _add(doc, parts, value)
            elif kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ValueError("testing value %s failed" % op.get("path"))
            else:
                raise ValueError("Unexpected kind: %s" % kind)
    except (ValueError, KeyError, TypeError) as exc:
        raise ApiError(422, "the server rejected our request due to an error in our request: %s" % exc,
                       reason="Invalid")
    return doc


# --- JSON merge patch (RFC 7386) --------------------------------------------------------------

def merge_patch(doc, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --- strategic merge patch -------------------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_DELETE_PRIM = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"


def strategic_merge_patch(doc, patch, kind):
    if not isinstance(patch, dict):
        raise ApiError(400, "json: cannot unmarshal array into Go value of type map[string]interface {}")
    table = _strategies(kind)
    try:
        result = _merge_map(copy.deepcopy(doc), copy.deepcopy(patch), "", table)
    except ValueError as exc:
        raise ApiError(422, "the server rejected our request due to an error in our request: %s" % exc,
                       reason="Invalid")
    return result if result is not None else {}


def _child(path, key):
    return key if not path else "%s.%s" % (path, key)


def _merge_map(orig, patch, path, table):
    orig = orig if isinstance(orig, dict) else {}
    directive = patch.pop(_DIRECTIVE, None)
    if directive == "replace":
        return _strip(patch)
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise ValueError("Unknown patch type: %s" % directive)
    retain = patch.pop(_RETAIN, None)
    if retain is not None:
        orig = dict((k, v) for k, v in orig.items() if k in retain)
    orders = {}
    for key in list(patch):
        if key.startswith(_ORDER):
            orders[key[len(_ORDER):]] = patch.pop(key)
    for key in list(patch):
        if key.startswith(_DELETE_PRIM):
            field = key[len(_DELETE_PRIM):]
            drop = patch.pop(key) or []
            if isinstance(orig.get(field), list):
                orig[field] = [v for v in orig[field] if v not in drop]
    for key, value in patch.items():
        cpath = _child(path, key)
        if value is None:
            orig.pop(key, None)
            continue
        have = orig.get(key)
        if isinstance(value, dict):
            merged = _merge_map(have if isinstance(have, dict) else {}, value, cpath, table)
            if merged is None:
                orig.pop(key, None)
            else:
                orig[key] = merged
        elif isinstance(value, list):
            orig[key] = _merge_list(have if isinstance(have, list) else [], value, cpath, table)
        else:
            orig[key] = value
    for field, order in orders.items():
        if isinstance(orig.get(field), list):
            orig[field] = _apply_order(orig[field], order, table.get(_child(path, field)))
    return orig


def _merge_list(orig, patch, path, table):
    if path not in table:
        return [_strip(v) for v in patch]
    key = table[path]
    if any(isinstance(v, dict) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [_strip(v) for v in patch if not (isinstance(v, dict) and v.get(_DIRECTIVE) == "replace")]
    if key == "":
        out = list(orig)
        for v in patch:
            if v not in out:
                out.append(v)
        return out
    out = list(orig)
    elem_path = path + "[]"
    for item in patch:
        if not isinstance(item, dict):
            raise ValueError("list %s with merge key %s holds a non-object element" % (path, key))
        if key not in item:
            raise ValueError("map: %s does not contain declared merge key: %s" % (item, key))
        match = None
        for idx, cur in enumerate(out):
            if isinstance(cur, dict) and cur.get(key) == item[key]:
                match = idx
                break
        if item.get(_DIRECTIVE) == "delete":
            if match is not None:
                out.pop(match)
            continue
        if match is None:
            out.append(_merge_map({}, item, elem_path, table))
        else:
            out[match] = _merge_map(out[match], item, elem_path, table)
    return out


def _apply_order(items, order, key):
    if not key:
        ranked = [v for v in order if v in items]
        return ranked + [v for v in items if v not in ranked]
    index = dict((o.get(key), i) for i, o in enumerate(order) if isinstance(o, dict))
    known = sorted([v for v in items if isinstance(v, dict) and v.get(key) in index],
                   key=lambda v: index[v.get(key)])
    return known + [v for v in items if not (isinstance(v, dict) and v.get(key) in index)]


def _strip(value):
    """Remove patch directives from a value that replaces whatever was there."""
    if isinstance(value, dict):
        return dict((k, _strip(v)) for k, v in value.items()
                    if not (k == _DIRECTIVE or k == _RETAIN or k.startswith(_ORDER) or k.startswith(_DELETE_PRIM)))
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "apply",
}


def apply_patch(doc, patch_type, body, kind):
    if patch_type == "json":
        return json_patch(doc, body)
    if patch_type == "merge":
        if not isinstance(body, dict):
            raise ApiError(400, "json: cannot unmarshal array into Go value of type map[string]interface {}")
        return merge_patch(doc, body)
    if patch_type == "strategic":
        return strategic_merge_patch(doc, body, kind)
    raise ValueError(patch_type)
