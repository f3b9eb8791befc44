"""Every task of the collection's roles and playbooks that calls one of its own modules passes only
options the module documents (DOCUMENTATION with its doc fragments, aliases included).

A task with an option the module does not take fails only when it runs ("Unsupported parameters"),
often deep in a rollout on real nodes; this reads every task file instead.
"""
import ast
import glob
import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PREFIX = "kubegpu.fleet."
# keys of a task that are no module options
TASK_KEYWORDS = {"args"}


def _docstring(path, attr="DOCUMENTATION", cls=None):
    tree = ast.parse(open(path).read())
    nodes = tree.body
    if cls is not None:
        nodes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls][0].body
    for node in nodes:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == attr for t in node.targets):
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no %s" % (path, attr))


def _option_names(options):
    out = set()
    for name, spec in (options or {}).items():
        out.add(name)
        out.update((spec or {}).get("aliases") or [])
    return out


def module_options(name):
    doc = _docstring(os.path.join(REPO, "plugins", "modules", name + ".py"))
    names = _option_names(doc.get("options"))
    fragments = doc.get("extends_documentation_fragment") or []
    for fragment in [fragments] if isinstance(fragments, str) else fragments:
        if not fragment.startswith(PREFIX):
            continue   # ansible.builtin.action_common_attributes*: attributes only
        parts = fragment[len(PREFIX):].split(".")
        attr = parts[1].upper() if len(parts) > 1 else "DOCUMENTATION"
        frag = _docstring(os.path.join(REPO, "plugins", "doc_fragments", parts[0] + ".py"), attr, "ModuleDocFragment")
        names |= _option_names((frag or {}).get("options"))
    return names


MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))
                 if not os.path.basename(p).startswith("_"))


def _tasks(items):
    for item in items or []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from _tasks(item.get(key))


def task_files():
    files = glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))
    files += glob.glob(os.path.join(REPO, "roles", "*", "handlers", "*.yml"))
    files += glob.glob(os.path.join(REPO, "playbooks", "*.yml"))
    files += glob.glob(os.path.join(REPO, "lab", "playbooks", "*.yml"))
    return sorted(files)


def module_calls():
    out = []
    for path in task_files():
        with open(path) as fh:
            doc = yaml.safe_load(fh)
        for task in _tasks(doc if isinstance(doc, list) else []):
            for key, value in task.items():
                if key.startswith(PREFIX) and key[len(PREFIX):] in MODULES and isinstance(value, dict):
                    out.append((os.path.relpath(path, REPO), task.get("name", "?"), key[len(PREFIX):],
                                sorted(value)))
    return out


CALLS = module_calls()


def test_the_roles_call_the_collections_modules():
    called = set(c[2] for c in CALLS)
    assert {"rollout_slot", "rollout_node_check", "reboot_need", "rollout_validation_verdict"} <= called, called


@pytest.mark.parametrize("where,task,module,keys", CALLS, ids=["%s:%s" % (c[0], c[1]) for c in CALLS])
def test_every_option_a_task_passes_is_one_the_module_takes(where, task, module, keys):
    unknown = [k for k in keys if k not in module_options(module) and k not in TASK_KEYWORDS]
    assert not unknown, "%s, task %r: kubegpu.fleet.%s takes no option %s" % (where, task, module, ", ".join(unknown))


def test_the_check_finds_an_option_the_module_does_not_take():
    options = module_options("rollout_node_check")
    assert "timeout" in options and "validate_timeout" not in options
    assert "api_key" in module_options("rollout_slot")          # from the k8s_auth fragment
