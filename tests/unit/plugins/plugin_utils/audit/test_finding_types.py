# -*- coding: utf-8 -*-
"""The finding table (plugins/plugin_utils/audit/finding_types.py) is the one definition of every
finding id: every id the audit can emit has a row, every row is emitted by some rule, and the
README's finding table lists exactly the rows, with their severities.

The emitted ids are read from the source with ``ast`` (nothing is imported, nothing runs): every
call of ``finding`` under plugins/plugin_utils/audit (the report excepted, which renders findings
and creates none) must name its id as a string literal, a conditional of literals, an item of a
module-level dict literal of literals (``SECURITY_IDS[component]``), or a name bound in the same
function to one of those or by a ``for`` over a module-level literal (``for fid in sorted(TABLE)``).
Anything else - an id computed from text, a function parameter, an aliased import of ``finding``,
a dict literal or ``dict()`` call with an ``evidence`` key (a finding built without the
constructor) - fails the scan, so no id can reach a report without this test seeing it.
"""
import ast
import os
import re

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit import finding_types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
AUDIT = os.path.join(REPO, "plugins", "plugin_utils", "audit")
README = os.path.join(REPO, "README.md")
SKIP = ("finding_types.py",)
SKIP_DIRS = ("report",)
ROW = re.compile(r"^\| `([^`]+)` \| (\w+) \|")


def audit_sources():
    """``{relative path: source}`` of the audit's code that may create findings."""
    out = {}
    for root, dirs, files in os.walk(AUDIT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("__"))
        for name in sorted(files):
            if name.endswith(".py") and name not in SKIP:
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, AUDIT)] = f.read()
    return out


def _literal_strings(node):
    """``{"values": [...], "keys": [...]}`` of a dict/tuple/list/set literal of string constants."""
    def strings(items):
        if all(isinstance(i, ast.Constant) and isinstance(i.value, str) for i in items):
            return [i.value for i in items]
        return None
    if isinstance(node, ast.Dict):
        return {"values": strings(node.values), "keys": strings(node.keys)}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {"values": None, "keys": strings(node.elts)}
    return None


class _Scan(ast.NodeVisitor):
    def __init__(self, where):
        self.where = where
        self.consts = {}
        self.ids = set()
        self.problems = []
        self.function = None

    def problem(self, node, what):
        self.problems.append("%s:%d: %s" % (self.where, getattr(node, "lineno", 0), what))

    def visit_Module(self, node):
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                lit = _literal_strings(stmt.value)
                if lit:
                    self.consts[stmt.targets[0].id] = lit
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        outer, self.function = self.function, node
        self.generic_visit(node)
        self.function = outer

    def visit_ImportFrom(self, node):
        for alias in node.names:
            if alias.name == "finding" and alias.asname not in (None, "finding"):
                self.problem(node, "finding imported as %s: call it by its name" % alias.asname)

    def visit_Dict(self, node):
        if any(isinstance(k, ast.Constant) and k.value == "evidence" for k in node.keys):
            self.problem(node, "a dict with an evidence key: create findings with finding_types.finding")
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name == "dict" and any(k.arg == "evidence" for k in node.keywords):
            self.problem(node, "dict(evidence=...): create findings with finding_types.finding")
        if name == "finding":
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "fid"), None)
            found = self.resolve(arg) if arg is not None else None
            if not found:
                self.problem(node, "finding id is not a literal or a table reference")
            else:
                self.ids |= found
        self.generic_visit(node)

    def _table(self, node, part):
        if isinstance(node, ast.Name) and node.id in self.consts and self.consts[node.id][part] is not None:
            return set(self.consts[node.id][part])
        if isinstance(node, ast.IfExp):
            a, b = self._table(node.body, part), self._table(node.orelse, part)
            return a | b if a and b else None
        return None

    def _bindings(self, name):
        out = []
        for node in ast.walk(self.function) if self.function is not None else ():
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                out.append(("assign", node.value))
            elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                    and node.target.id == name:
                out.append(("for", node.iter))
            elif isinstance(node, ast.arg) and node.arg == name:
                out.append(("param", None))
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and \
                    isinstance(node.target, ast.Name) and node.target.id == name:
                out.append(("other", None))
        return out

    def resolve(self, node, depth=0):
        """The set of ids ``node`` can be, or None when that is not known from literals."""
        if depth > 5:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            a, b = self.resolve(node.body, depth + 1), self.resolve(node.orelse, depth + 1)
            return a | b if a and b else None
        if isinstance(node, ast.Subscript):
            return self._table(node.value, "values")
        if isinstance(node, ast.Name):
            bindings = self._bindings(node.id)
            if not bindings:
                return None
            out = set()
            for kind, value in bindings:
                if kind == "assign":
                    got = self.resolve(value, depth + 1)
                elif kind == "for":
                    it = value
                    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "sorted" \
                            and len(it.args) == 1:
                        it = it.args[0]
                    got = self._table(it, "keys")
                else:
                    got = None
                if not got:
                    return None
                out |= got
            return out
        return None


def scan(sources):
    """``(ids the sources can emit, problems)`` for ``{path: source}``."""
    ids, problems = set(), []
    for where, source in sorted(sources.items()):
        s = _Scan(where)
        s.visit(ast.parse(source))
        ids |= s.ids
        problems += s.problems
    return ids, problems


def table_problems(emitted, types):
    """Ids emitted without a row and rows no rule emits."""
    return (["%s: emitted by a rule, no row in finding_types" % i for i in sorted(set(emitted) - set(types))]
            + ["%s: a row no rule emits" % i for i in sorted(set(types) - set(emitted))])


def readme_rows(text):
    """``{id: severity}`` of the README's finding table, or None without its markers."""
    if finding_types.README_BEGIN not in text or finding_types.README_END not in text:
        return None
    section = text.split(finding_types.README_BEGIN, 1)[1].split(finding_types.README_END, 1)[0]
    rows = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def readme_problems(text, types):
    rows = readme_rows(text)
    if rows is None:
        return ["README.md has no finding table (markers %r ... %r)"
                % (finding_types.README_BEGIN, finding_types.README_END)]
    out = ["%s: in the table, not in README.md" % i for i in sorted(set(types) - set(rows))]
    out += ["%s: in README.md, not in the table" % i for i in sorted(set(rows) - set(types))]
    out += ["%s: README.md says %s, the table %s" % (i, rows[i], types[i].severity)
            for i in sorted(set(rows) & set(types)) if rows[i] != types[i].severity]
    return out


# ---------------------------------------------------------------------------------------------


def test_the_scan_reads_the_audit_code():
    sources = audit_sources()
    assert "evaluate.py" in sources and os.path.join("rules", "gpu.py") in sources
    ids, problems = scan(sources)
    assert problems == []
    assert len(ids) > 40


def test_every_emitted_id_has_a_row_and_every_row_is_emitted():
    ids, _problems = scan(audit_sources())
    assert table_problems(ids, finding_types.TYPES) == []


def test_readme_lists_exactly_the_rows():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    assert readme_problems(text, finding_types.TYPES) == []
    # and it is the generated text (scripts/finding_table.py --write regenerates it)
    section = text[text.index(finding_types.README_BEGIN):text.index(finding_types.README_END)]
    assert section + finding_types.README_END + "\n" == finding_types.markdown_table()


def test_rows_are_well_formed():
    for fid, row in finding_types.TYPES.items():
        assert fid == row.id and re.match(r"^[a-z]+\.[a-z0-9_-]+$", fid)
        assert row.severity in finding_types.SEVERITIES and row.scope in finding_types.SCOPES
        assert row.role is None or row.role in finding_types.ROLES
        assert all(isinstance(r, str) and r.startswith("https://") for r in row.references)
        assert not (row.manual and row.drain) and not (row.hands_on and not row.manual)


# ---------------------------------------------------------------- the checks fail on bad input

RULE = '''
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.finding_types import finding

IDS = {"a": "gpu.xid", "b": "gpu.rma"}


def rule(ctx, fid):
    kind = "gpu.fabric" if ctx else "gpu.nvlink"
    out = [finding("node.not_ready", {}), finding(kind, {}), finding(IDS[ctx], {})]
    for name in sorted(IDS):
        out.append(finding(name, {}))
    return out
'''


def test_a_rule_emitting_an_id_without_a_row_fails():
    ids, problems = scan({"rules/x.py": RULE.replace('"node.not_ready"', '"node.on_fire"')})
    assert problems == [] and "node.on_fire" in ids
    assert "node.on_fire: emitted by a rule, no row in finding_types" in table_problems(ids, finding_types.TYPES)


def test_the_scan_resolves_literals_conditionals_and_tables():
    ids, problems = scan({"rules/x.py": RULE})
    assert problems == []
    assert ids == {"node.not_ready", "gpu.fabric", "gpu.nvlink", "gpu.xid", "gpu.rma", "a", "b"}


@pytest.mark.parametrize("bad", [
    RULE.replace('finding("node.not_ready", {})', 'finding(fid, {})'),                    # a parameter
    RULE.replace('finding("node.not_ready", {})', 'finding("gpu." + ctx, {})'),           # computed text
    RULE.replace('finding("node.not_ready", {})', 'finding(ctx.get("id"), {})'),
    RULE.replace("import finding", "import finding as make"),                              # aliased
    RULE + '\n\ndef sneaky():\n    return [{"id": "gpu.sneaky", "evidence": {}}]\n',      # no constructor
    RULE + '\n\ndef sneaky():\n    return [dict(id="gpu.sneaky", evidence={})]\n',
    RULE.replace('kind = "gpu.fabric" if ctx else "gpu.nvlink"',
                 'kind = "gpu.fabric" if ctx else "gpu.nvlink"\n    kind = ctx["id"]'),  # rebound
], ids=["parameter", "concatenation", "lookup", "aliased-import", "dict-literal", "dict-call", "rebound"])
def test_an_id_the_scan_cannot_see_fails(bad):
    _ids, problems = scan({"rules/x.py": bad})
    assert problems


def test_a_row_no_rule_emits_fails():
    ids, _problems = scan(audit_sources())
    types = dict(finding_types.TYPES)
    types["gpu.haunted"] = finding_types.TYPES["gpu.xid"]._replace(id="gpu.haunted")
    assert table_problems(ids, types) == ["gpu.haunted: a row no rule emits"]


def test_a_readme_row_missing_or_wrong_fails():
    table = finding_types.markdown_table()
    assert readme_problems(table, finding_types.TYPES) == []
    missing = "\n".join(line for line in table.splitlines() if "`gpu.rma`" not in line)
    assert readme_problems(missing, finding_types.TYPES) == ["gpu.rma: in the table, not in README.md"]
    wrong = table.replace("| `gpu.rma` | critical |", "| `gpu.rma` | info |")
    assert readme_problems(wrong, finding_types.TYPES) == ["gpu.rma: README.md says info, the table critical"]
    extra = table.replace(finding_types.README_END, "| `gpu.ghost` | info | node | x | y |\n" + finding_types.README_END)
    assert readme_problems(extra, finding_types.TYPES) == ["gpu.ghost: in README.md, not in the table"]
    assert readme_problems("no table here", finding_types.TYPES)[0].startswith("README.md has no finding table")
