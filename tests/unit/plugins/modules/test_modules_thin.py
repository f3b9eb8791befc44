# -*- coding: utf-8 -*-
"""Every module under plugins/modules is thin (docs/development.md): documentation, an argument
spec and a main() that calls into module_utils, where the logic lives as plain functions unit
tests call directly.

Checked on the source with ``ast`` (nothing is imported):

* at module level only imports, ``__metaclass__``, DOCUMENTATION/EXAMPLES/RETURN and other
  UPPER_CASE constants (no lambdas), the Ansible ``try: import ... except ImportError:`` idiom
  (imports and constants only), ``def main()`` and ``if __name__ == "__main__": main()``;
  no other function or class;
* main() defines no function, class or lambda, and its body outside the ``AnsibleModule(...)``
  statement (the declarative argument spec, which may be long: kubelet_config's is 28 of its
  29 body lines) is at most MAIN_LOGIC_LINES lines.

A probe module's main() builds its AnsibleModule and ends in one call,
``run_probe_module(module, <helper>, module.params, ...)`` (module_utils/_common/node_probes.py),
which exits with the helper's result or fails with its ProbeFailed; the others hand the module
to one runner (``run_driver_guard(module)``) or catch their helper's one error type (boot_facts,
gpu_reset: 5 lines). MAIN_LOGIC_LINES is that largest main(), plus one line.
"""
import ast
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", "plugins", "modules"))
MAIN_LOGIC_LINES = 6
CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


def _is_constant_assignment(node):
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return False
    names = [t.id if isinstance(t, ast.Name) else None for t in targets]
    if names == ["__metaclass__"]:
        return True
    if not all(n is not None and CONSTANT.match(n) for n in names):
        return False
    return node.value is None or not any(isinstance(x, ast.Lambda) for x in ast.walk(node.value))


def _is_import_or_constant(node):
    return isinstance(node, (ast.Import, ast.ImportFrom)) or _is_constant_assignment(node)


def _is_optional_import(node):
    """``try: import x / HAS_X = True except ImportError: HAS_X = False`` (optional finally/else)."""
    if not isinstance(node, ast.Try):
        return False
    blocks = [node.body, node.orelse, node.finalbody] + [h.body for h in node.handlers]
    return all(_is_import_or_constant(s) or isinstance(s, ast.Pass) for b in blocks for s in b)


def _is_main_guard(node):
    """``if __name__ == "__main__": main()`` exactly."""
    if not isinstance(node, ast.If) or node.orelse or len(node.body) != 1:
        return False
    test, body = node.test, node.body[0]
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.comparators) == 1
            and getattr(test.comparators[0], "value", None) == "__main__"
            and isinstance(body, ast.Expr) and isinstance(body.value, ast.Call)
            and getattr(body.value.func, "id", None) == "main" and not body.value.args)


def _is_module_construction(stmt):
    value = getattr(stmt, "value", None)
    return (isinstance(stmt, ast.Assign) and isinstance(value, ast.Call)
            and getattr(value.func, "id", None) == "AnsibleModule")


def problems(source, name="<module>", action_plugin=False):
    """What makes the module source ``source`` not thin (empty list: thin). With
    ``action_plugin`` (plugins/action/<name>.py exists) the module may be documentation only,
    without main(): the action plugin is the implementation."""
    tree = ast.parse(source, name)
    out = []
    mains = []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
                and isinstance(node.value.value, str):
            continue  # a docstring
        if _is_import_or_constant(node) or _is_optional_import(node) or _is_main_guard(node):
            continue
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            mains.append(node)
            continue
        what = getattr(node, "name", None) or type(node).__name__
        out.append("line %d: %s at module level (only main(), imports and UPPER_CASE constants; "
                   "move it to module_utils)" % (node.lineno, what))
    if len(mains) != 1 and not (action_plugin and not mains):
        out.append("%d main() functions, expected one" % len(mains))
    for main in mains:
        if main.args.args or main.args.vararg or main.args.kwarg:
            out.append("main() takes arguments")
        for node in ast.walk(main):
            if node is not main and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.ClassDef, ast.Lambda)):
                out.append("line %d: main() defines %s" % (node.lineno, getattr(
                    node, "name", "a lambda")))
        logic = sum(s.end_lineno - s.lineno + 1 for s in main.body if not _is_module_construction(s))
        if logic > MAIN_LOGIC_LINES:
            out.append("main() has %d lines outside its AnsibleModule(...) statement, more than "
                       "%d: move the logic to module_utils" % (logic, MAIN_LOGIC_LINES))
    return out


def module_files():
    return sorted(f for f in os.listdir(MODULES) if f.endswith(".py") and f != "__init__.py")


def test_the_modules_are_found():
    names = module_files()
    assert "checkpoint_sync.py" in names and "audit_node.py" in names and len(names) >= 15


@pytest.mark.parametrize("name", module_files())
def test_module_is_thin(name):
    with open(os.path.join(MODULES, name)) as f:
        source = f.read()
    action = os.path.join(MODULES, "..", "action", name)
    assert problems(source, name, action_plugin=os.path.exists(action)) == []


# ------------------------------------------------------------------ the checker itself

THIN = '''
from __future__ import absolute_import, division, print_function
__metaclass__ = type
DOCUMENTATION = "module: x"
EXAMPLES = RETURN = ""
try:
    import yaml
    HAS_YAML = True
except ImportError:
    HAS_YAML = False
from ansible.module_utils.basic import AnsibleModule
_LIMIT = 4096


def main():
    module = AnsibleModule(
        argument_spec=dict(
%s        ),
    )
    module.exit_json(**run(module.params))


if __name__ == "__main__":
    main()
'''


def test_a_thin_module_with_a_long_argument_spec_passes():
    spec = "".join("            o%d=dict(type='str'),\n" % i for i in range(60))
    assert problems(THIN % spec) == []


@pytest.mark.parametrize("extra, expected", [
    ("\ndef _remove(module):\n    pass\n", "line 26: _remove at module level"),
    ("\nclass Helper(object):\n    pass\n", "line 26: Helper at module level"),
    ("\nhelper = dict(a=1)\n", "line 26: Assign at module level"),
    ("\nLIMIT = lambda: 1\n", "line 26: Assign at module level"),
    ("\nif True:\n    main()\n", "line 26: If at module level"),
    ("\ntry:\n    main()\nexcept Exception:\n    pass\n", "line 26: Try at module level"),
])
def test_anything_but_main_and_constants_fails(extra, expected):
    source = THIN % "" + extra
    found = problems(source)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_logic_in_main_fails():
    body = "".join("    x%d = module.params['a'] + %d\n" % (i, i) for i in range(MAIN_LOGIC_LINES - 1))
    at_bound = (THIN % "").replace("    module.exit_json(", body + "    module.exit_json(")
    assert problems(at_bound) == []
    over = at_bound.replace("    module.exit_json(", "    y = 1\n    module.exit_json(")
    assert problems(over) == ["main() has %d lines outside its AnsibleModule(...) statement, more "
                              "than %d: move the logic to module_utils"
                              % (MAIN_LOGIC_LINES + 1, MAIN_LOGIC_LINES)]
    nested = (THIN % "").replace("    module.exit_json(", "    def f():\n        pass\n"
                                 "    module.exit_json(")
    assert problems(nested) == ["line 20: main() defines f"]
    assert problems((THIN % "").replace("def main():", "def run(p):\n    return p\n\n\ndef x():")) \
        == ["line 15: run at module level (only main(), imports and UPPER_CASE constants; move it "
            "to module_utils)", "line 19: x at module level (only main(), imports and UPPER_CASE "
            "constants; move it to module_utils)", "0 main() functions, expected one"]


def test_a_documentation_only_module_needs_its_action_plugin():
    doc_only = '__metaclass__ = type\nDOCUMENTATION = "module: x"\nEXAMPLES = RETURN = ""\n'
    assert problems(doc_only, action_plugin=True) == []
    assert problems(doc_only) == ["0 main() functions, expected one"]
    assert problems(doc_only + "\n\ndef helper():\n    pass\n", action_plugin=True) == [
        "line 6: helper at module level (only main(), imports and UPPER_CASE constants; move it "
        "to module_utils)"]
