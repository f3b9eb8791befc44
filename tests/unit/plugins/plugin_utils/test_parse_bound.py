"""The parse bound for node data on the controller (plugins/plugin_utils/parse_bound.py): the
shape check before parsing, the forked parse killed at its deadline, and the TOML and JSON entry
points; the real stack-facts and toolkit_config edit functions fed the 256 KiB hostile corpus;
and the structure check that no controller code parses a document any other way.

No test asserts a duration: a parse that never ends is shown stopped by its result (a
ParseTimeout, the child reaped)."""
import ast
import datetime
import os
import signal
import tomllib

import pytest

from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound as pb
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.rollout import record as ro
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import facts as tc
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.stack import toolkit_config as tce
from ansible_collections.kubegpu.fleet.tests.lib import hostile_toml
from ansible_collections.kubegpu.fleet.tests.lib.paths import REPO, TOOLKIT_CONFIG

with open(TOOLKIT_CONFIG) as _f:
    CONFIG = _f.read()
HOOK = "features.disable-cuda-compat-lib-hook"


def big_real_config(copies):
    """``copies`` of the packaged file with distinct table and key names: a large valid config
    of the real shape (beyond the in-process limits, within the shape limits)."""
    out = []
    for i in range(copies):
        text = CONFIG.replace("[nvidia-", "[x%d-nvidia-" % i).replace("disable-require", "dr%d" % i)
        out.append(text.replace("supported-driver-capabilities", "sdc%d" % i))
    return "".join(out)


# --------------------------------------------------------------------------- shape check

def test_the_packaged_config_is_within_the_in_process_limits():
    shape = pb.check_toml_shape(CONFIG)
    assert shape == pb.Shape(bytes=len(CONFIG.encode()), lines=CONFIG.count("\n") + 1,
                             max_line=max(len(line) for line in CONFIG.split("\n")), max_key_parts=3,
                             max_key_len=len("nvidia-container-runtime.modes.legacy"), max_nesting=1, keys=16, tables=8)
    assert pb.within(shape, pb.IN_PROCESS) and pb.within(shape, pb.TOML_LIMITS)


def test_strings_and_comments_are_not_measured_as_keys_or_nesting():
    text = ('a = "x.y.z.w.v.u.t.s.r [[[[{{{{ = ,"  # b.c.d.e.f.g.h.i.j [[[[\n'
            "'q.q.q.q.q.q.q.q.q' = 'lit.[.{'\n"
            'm = """\n[not.a.table.header.at.all.nine.parts]\nk.k.k.k.k.k.k.k.k = 1\n"""\n'
            "n = '''\n[[x.x.x.x.x.x.x.x.x]]\n'''\n"
            'e = "esc \\" a.b.c.d.e.f.g.h.i = ["\n'
            "[real.table]\n"
            "inline = { p.q = 1, r = [1, [2, {s.t.u = 3}]] }\n")
    shape = pb.check_toml_shape(text)
    assert shape.tables == 1 and shape.keys == 9  # a, 'q...', m, n, e, inline, p.q, r, s.t.u
    assert shape.max_key_parts == 3 and shape.max_nesting == 4
    assert tomllib.loads(text)["m"].startswith("[not.a.table")


@pytest.mark.parametrize("text,words", [
    ("a" + ".a" * 8 + " = 1\n", "has a dotted key of 9 parts (line 1), more than the 8"),
    ("x = 1\n[" + ".".join(["t"] * 9) + "]\n", "has a dotted key of 9 parts (line 2), more than the 8"),
    ("k" * 257 + " = 1\n", "has a key of 257 characters (line 1), more than the 256"),
    ("x = " + "[" * 33 + "]" * 33 + "\n", "has arrays or inline tables nested 33 levels deep (line 1), more than the 32"),
    ("x = \"" + "y" * 16400 + "\"\n", "has a line of 16406 characters, more than the 16384"),
    ("#\n" * 16384, "has 16385 lines, more than the 16384"),
    ("".join("k%d = 1\n" % i for i in range(8193)), "has 8193 keys, more than the 8192"),
    ("".join("[t%d]\n" % i for i in range(2049)), "has 2049 tables, more than the 2048"),
    ("#" * (256 << 10) + "\n", "is 262145 bytes, more than the 262144 bytes"),
])
def test_each_limit_refuses_with_its_reason_and_line(text, words):
    with pytest.raises(pb.ShapeError) as e:
        pb.check_toml_shape(text, what="config.toml from node gpu-1")
    assert str(e.value).startswith("config.toml from node gpu-1 ") and words in str(e.value), str(e.value)


def test_not_text_is_refused():
    for value in (b"a = 1\n", None, ["a = 1"], {"a": 1}):
        with pytest.raises(pb.ShapeError):
            pb.check_toml_shape(value)


# --------------------------------------------------------------------------- the time bound

class Refused(ValueError):
    pass


def _spin():
    while True:
        pass


def _raise_refused(text):
    raise Refused("refused: %s" % text)


def _raise_type_error():
    return len(5)


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


class _Custom(object):
    pass


def test_a_parser_that_never_returns_is_killed_at_the_deadline_and_reaped():
    with pytest.raises(pb.ParseTimeout) as e:
        pb.run_bounded(_spin, (), "config.toml from node gpu-1", deadline=0.2)
    assert str(e.value) == "config.toml from node gpu-1 could not be parsed within 0.2 s (the parser was stopped)"
    with pytest.raises(ChildProcessError):  # killed and reaped: no zombie left behind
        os.waitpid(e.value.pid, os.WNOHANG)


def test_results_and_exceptions_come_back_from_the_child():
    assert pb.run_bounded(tomllib.loads, (CONFIG,)) == tomllib.loads(CONFIG)
    when = pb.run_bounded(tomllib.loads, ("t = 1979-05-27T07:32:00-08:00\nd = 1979-05-27\n",))
    assert when["t"].utcoffset() == datetime.timedelta(hours=-8) and when["d"] == datetime.date(1979, 5, 27)
    with pytest.raises(Refused) as e:
        pb.run_bounded(_raise_refused, ("x",), passthrough=(Refused,))
    assert str(e.value) == "refused: x"
    with pytest.raises(pb.ParseError) as e:
        pb.run_bounded(_raise_type_error, (), "the doc")
    assert str(e.value).startswith("the doc: the parser failed: TypeError: ")
    with pytest.raises(pb.ParseError) as e:
        pb.run_bounded(_die, (), "the doc")
    assert str(e.value) == "the doc: the parse process was killed by signal 9"


def test_a_result_too_large_or_of_another_type_is_refused():
    with pytest.raises(pb.ParseError) as e:
        pb.run_bounded(str.__mul__, ("x", 5000), "the doc", max_result=1000)
    assert "the parse result is larger than 1000 bytes" in str(e.value)
    with pytest.raises(pb.ParseError) as e:
        pb.run_bounded(_Custom, (), "the doc")
    assert "could not be read back" in str(e.value) and "_Custom is not a parse result type" in str(e.value)


# --------------------------------------------------------------------------- TOML entry points

def test_load_toml_in_process_and_forked_equal_tomllib():
    assert pb.load_toml(CONFIG) == tomllib.loads(CONFIG)
    big = big_real_config(40)  # about 48 KiB: beyond the in-process limits, parsed in the child
    assert not pb.within(pb.check_toml_shape(big), pb.IN_PROCESS)
    assert pb.load_toml(big, node="gpu-1") == tomllib.loads(big)
    with pytest.raises(pb.ParseError) as e:
        pb.load_toml(big + "[x0-nvidia-ctk]\n", node="gpu-1")
    assert str(e.value).startswith("config.toml from node gpu-1 is not valid TOML: ")


def test_the_packaged_config_edits_the_same_in_the_bound():
    new, changes = tce.edit(CONFIG, {HOOK: True}, "/etc/c.toml", "gpu-1")
    assert new == CONFIG + "\n[features]\ndisable-cuda-compat-lib-hook = true\n"
    assert changes == [{"key": HOOK, "before": None, "after": "true"}]
    with pytest.raises(tce.TomlEditError) as e:  # a refusal inside the child keeps its type and message
        tce.edit("features = { disable-cuda-compat-lib-hook = false }\n", {HOOK: True}, "/etc/c.toml")
    assert "inline table" in str(e.value)


@pytest.mark.parametrize("name", sorted(hostile_toml.corpus()))
def test_hostile_config_toml_through_the_stack_facts_step(name):
    """The real controller step of the stack probe (toolkit_config.finish_stack_facts) on each
    256 KiB hostile text: refused by the shape check with its reason, or parsed; the file is
    then treated as unreadable, with a warning that names the node."""
    text = hostile_toml.corpus()[name]
    assert len(text.encode()) <= hostile_toml.SIZE
    stack = {"container_toolkit": {"installed": True, "version": "1.17.8", "config_path": "/etc/c.toml",
                                   "config_text": text, "config_error": None, "runtime_binaries": ["runc"]}}
    stack, warnings = tc.finish_stack_facts(stack, node="gpu-1")
    tk = stack["container_toolkit"]
    assert "config_text" not in tk
    if name in hostile_toml.PARSED:
        assert tk["config_error"] is None and tk["config"] is not None and warnings == []
        return
    assert tk["config"] is None and tk["injection_mode"] is None and tk["runtime"] is None
    assert tk["injection_mode_reason"] == "config.toml could not be read"
    assert tk["config_error"].startswith("config.toml from node gpu-1 ")
    assert hostile_toml.REFUSED_BY_SHAPE[name] in tk["config_error"]
    assert tk["config_error"].endswith("; treated as unreadable")
    assert warnings == ["nvidia-container-runtime config /etc/c.toml: %s" % tk["config_error"]]


def test_an_edit_that_does_not_finish_is_stopped_with_a_clear_message():
    """tomlkit on 8000 keys of 8 parts (within every shape limit) runs for many seconds: the
    bound's child is killed at the deadline and the edit is refused."""
    text = hostile_toml.corpus()["dotted_within_limits"]
    with pytest.raises(tce.TomlEditError) as e:
        tce.plan_edit(text.encode(), {HOOK: True}, "/etc/nvidia-container-runtime/config.toml", "gpu-1")
    assert str(e.value) == ("/etc/nvidia-container-runtime/config.toml from node gpu-1 could not be parsed within "
                            "%g s (the parser was stopped); refusing to edit it" % pb.DEADLINE_S)


def test_hostile_shapes_are_refused_by_the_edit_before_parsing():
    text = hostile_toml.corpus()["deep_dotted_lines"]
    with pytest.raises(tce.TomlEditError) as e:
        tce.edit(text, {HOOK: True}, "/etc/c.toml", "gpu-1")
    assert str(e.value) == ("/etc/c.toml from node gpu-1 has a dotted key of 40 parts (line 1), more than the 8 "
                            "parsed on the controller; refusing to edit it")


# --------------------------------------------------------------------------- stack shape

@pytest.mark.parametrize("stack,words", [
    ([], "nvidia_stack is a list, not a dict"),
    ({"container_toolkit": "yes"}, "nvidia_stack.container_toolkit is a str, not a dict"),
    ({"container_toolkit": {"config_text": ["a = 1"]}}, "config_text is a list, not text"),
    ({"container_toolkit": {"installed": True, "runtime_binaries": 5}}, "runtime_binaries is a int, not a list"),
    ({"container_toolkit": {"installed": True, "runtime_binaries": [{"runc": 1}]}}, "runtime_binaries holds"),
    ({"container_toolkit": {"installed": "yes"}}, "installed is a str, not a boolean"),
    ({"container_toolkit": {"version": 1.17}}, "version is a float, not text"),
    ({"container_toolkit": {"config_path": {"p": 1}}}, "config_path is a dict, not text"),
])
def test_a_stack_of_the_wrong_shape_is_refused_before_anything_changes(stack, words):
    before = repr(stack)
    with pytest.raises(tc.StackShapeError) as e:
        tc.finish_stack_facts(stack)
    assert words in str(e.value)
    assert repr(stack) == before


# --------------------------------------------------------------------------- JSON

def test_load_json_bounds_size_and_nesting():
    assert pb.load_json('{"a": [1, {"b": "[[[{{{\\"["}]}') == {"a": [1, {"b": '[[[{{{"['}]}
    assert pb.load_json(b'{"x": 1}') == {"x": 1}
    with pytest.raises(pb.ShapeError) as e:
        pb.load_json("[" * 100000 + "]" * 100000, "the annotation", node="gpu-1")
    assert str(e.value) == "the annotation from node gpu-1 is nested more than 64 levels deep"
    with pytest.raises(pb.ShapeError):
        pb.load_json(" " * (pb.JSON_MAX_BYTES + 1))
    with pytest.raises(pb.ParseError) as e:
        pb.load_json(b"\xff{}")
    assert "is not UTF-8" in str(e.value)
    with pytest.raises(pb.ParseError) as e:
        pb.load_json('{"a": ')
    assert "is not valid JSON" in str(e.value)


def test_a_hostile_maintenance_annotation_is_unreadable_not_a_crash():
    assert ro.parse_maintenance_annotation("[" * 200000) is None  # json.loads alone: RecursionError
    assert ro.parse_maintenance_annotation(7) is None
    assert ro.parse_maintenance_annotation('{"was_unschedulable": true}') == {"was_unschedulable": True}


# --------------------------------------------------------------------------- structure

CONTROLLER_DIRS = ("plugins/action", "plugins/plugin_utils", "plugins/filter")
PARSER_MODULES = ("json", "yaml", "tomllib", "tomli", "tomlkit", "xml", "pickle", "marshal", "ast", "plistlib",
                  "configparser", "csv", "lxml", "defusedxml", "simplejson", "ujson", "orjson", "ruamel")
PARSE_ATTRS = ("load", "loads", "safe_load", "safe_load_all", "load_all", "full_load", "unsafe_load", "parse",
               "fromstring", "fromstringlist", "XML", "iterparse", "literal_eval", "reader", "DictReader",
               "read_string", "Unpickler")
IMPORT_IS_PARSING = ("tomllib", "tomli", "tomlkit", "xml", "pickle", "marshal", "plistlib", "lxml", "defusedxml",
                     "configparser", "csv", "ruamel")
# Parsers outside the bound, each with why what it parses is not node data.
ALLOWED = {
    "plugins/plugin_utils/parse_bound.py": None,  # the bound itself
    # the edit's document model; edit() runs _edit only through parse_bound.toml_bounded (tested above)
    "plugins/plugin_utils/stack/toolkit_config.py": {"import tomlkit", "tomlkit.parse"},
    # the collection's own catalog files and JSON schema
    "plugins/plugin_utils/catalog/load.py": {"json.load", "yaml.load"},
    # the collection's own galaxy.yml / MANIFEST.json
    "plugins/plugin_utils/audit/report/build.py": {"json.load", "yaml.safe_load"},
    # the Kubernetes API server's own response (the server validates and bounds objects)
    "plugins/plugin_utils/k8s/client.py": {"json.loads"},
}


def parser_uses(path):
    """``{"import M", "M.attr", ...}``: parser modules imported and their parse functions called."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    aliases, out = {}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in PARSER_MODULES:
                    aliases[a.asname or top] = top
                    if top in IMPORT_IS_PARSING:
                        out.add("import %s" % top)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PARSER_MODULES:
            top = node.module.split(".")[0]
            if top in IMPORT_IS_PARSING:
                out.add("import %s" % top)
            for a in node.names:
                aliases[a.asname or a.name] = "%s.%s" % (top, a.name) if a.name in PARSE_ATTRS else top
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in aliases \
                and func.attr in PARSE_ATTRS:
            out.add("%s.%s" % (aliases[func.value.id], func.attr))
        elif isinstance(func, ast.Name) and "." in aliases.get(func.id, ""):
            out.add(aliases[func.id])
    return out


def controller_files():
    for top in CONTROLLER_DIRS:
        for dirpath, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, REPO), path


def test_controller_code_parses_documents_only_through_the_bound():
    offending = {}
    for rel, path in controller_files():
        allowed = ALLOWED.get(rel, set())
        if allowed is None:
            continue
        extra = parser_uses(path) - allowed
        if extra:
            offending[rel] = sorted(extra)
    assert offending == {}, "parse node data through plugins/plugin_utils/parse_bound.py: %s" % offending
    assert parser_uses(os.path.join(REPO, "plugins/plugin_utils/stack/facts.py")) == set()


def test_the_structure_check_catches_a_parser_call(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nimport tomllib as t\nfrom yaml import safe_load\nfrom xml.etree import ElementTree as ET\n"
                   "json.dumps({})\njson.loads('1')\nt.loads('')\nsafe_load('a')\nET.fromstring('<a/>')\n")
    assert parser_uses(str(bad)) == {"json.loads", "import tomllib", "tomllib.loads", "yaml.safe_load",
                                     "import xml", "xml.fromstring"}
