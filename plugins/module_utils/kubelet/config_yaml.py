# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading and writing KubeletConfiguration text: JSON, or YAML through PyYAML's safe loader.

Node side, Python 3.8+. :func:`load_config_text` is the one reader of the collection's kubelet
config files: it refuses YAML anchors and aliases and nesting deeper than ``MAX_DEPTH`` before
anything is built, and raises :class:`ConfigParseError` and nothing else.
:func:`dump_config_yaml` writes block-style YAML the loader reads back unchanged.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import traceback

from ansible.module_utils.basic import missing_required_lib

try:
    import yaml
    HAS_YAML = True
    YAML_IMPORT_ERROR = None
except ImportError:  # the modules fail with missing_required_lib; the audit reports it
    yaml = None
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()

# Far deeper than any KubeletConfiguration (4 levels); bounds every reader's recursion.
MAX_DEPTH = 64
ANCHORS_REFUSED = ("YAML anchors and aliases (&name, *name) are refused: an alias can expand a "
                   "small file into a huge one; write the values out")
YAML_INSTALL_HINT = ("Install PyYAML on the node: the python3-yaml package (Debian, Ubuntu, "
                     "Fedora, RHEL 9), python3-pyyaml (RHEL 8), or pip install PyYAML")


class ConfigParseError(ValueError):
    """The text is not a JSON/YAML document this collection reads; the message names the line."""

    def __init__(self, msg, line=None):
        self.line = line
        if line is not None:
            msg = "line %d: %s" % (line, msg)
        super(ConfigParseError, self).__init__(msg)


def _nested_too_deep():
    return ConfigParseError("nested more than %d levels deep; not a KubeletConfiguration"
                            % MAX_DEPTH)


YAML_LOADERS = []  # the refusing loaders, fastest first
if HAS_YAML:
    try:
        from yaml._yaml import CParser as _LibyamlParser  # libyaml's scanner and parser
    except ImportError:  # PyYAML built without libyaml
        _LibyamlParser = None

    class _RefusingComposer(yaml.composer.Composer):
        """Composes PyYAML's node graph, refusing anchors, aliases and deep nesting at their
        event (before anything is built or expanded); YAML 1.1 timestamps stay the strings the
        kubelet's Go decoder sees."""

        yaml_implicit_resolvers = dict(
            (first, [(tag, regexp) for tag, regexp in resolvers
                     if tag != "tag:yaml.org,2002:timestamp"])
            for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items())
        _kubegpu_depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigParseError(ANCHORS_REFUSED, event.start_mark.line + 1)
            depth = self._kubegpu_depth + 1
            if depth > MAX_DEPTH:
                raise _nested_too_deep()
            self._kubegpu_depth = depth
            try:
                return super(_RefusingComposer, self).compose_node(parent, index)
            finally:
                self._kubegpu_depth = depth - 1

    class _PureLoader(_RefusingComposer, yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """PyYAML's pure-Python safe loader with the refusals."""

    YAML_LOADERS.append(_PureLoader)
    if _LibyamlParser is not None:
        class _LibyamlLoader(_RefusingComposer, _LibyamlParser, yaml.constructor.SafeConstructor,
                             yaml.resolver.Resolver):
            """libyaml's events (5 times faster) composed in Python with the refusals."""

            def __init__(self, stream):  # pylint: disable=super-init-not-called
                _LibyamlParser.__init__(self, stream)
                _RefusingComposer.__init__(self)
                yaml.constructor.SafeConstructor.__init__(self)
                yaml.resolver.Resolver.__init__(self)

        YAML_LOADERS.insert(0, _LibyamlLoader)

    class _ConfigDumper(yaml.SafeDumper):  # pylint: disable=too-many-ancestors
        """Block style, key order kept, sequences indented under their key."""

        def increase_indent(self, flow=False, indentless=False):
            return super(_ConfigDumper, self).increase_indent(flow, False)

    def _represent_str(dumper, data):
        # PyYAML writes NEL and the Unicode line separators raw in plain and single-quoted
        # scalars, where a reader folds them; double quotes escape them.
        style = '"' if any(c in data for c in u"\x85\u2028\u2029") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    _ConfigDumper.add_representer(str, _represent_str)


def check_depth(data, limit=MAX_DEPTH):
    """Raise ConfigParseError when ``data`` nests more than ``limit`` levels (iterative)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                raise _nested_too_deep()
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def _plain(data):
    """JSON-safe data from explicit YAML tags (!!binary, !!set, !!omap; depth is bounded)."""
    if isinstance(data, dict):
        return dict((k if isinstance(k, (str, int, float, bool)) or k is None else str(_plain(k)),
                     _plain(v)) for k, v in data.items())
    if isinstance(data, (list, tuple)):
        return [_plain(v) for v in data]
    if isinstance(data, (set, frozenset)):
        return sorted((_plain(v) for v in data), key=repr)
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    if isinstance(data, (datetime.date, datetime.datetime)):
        return data.isoformat()
    return data


def load_config_text(text, loader_class=None):
    """Parse a kubelet config file's text; return ``(data, parser)``, parser ``json`` (text
    that starts with ``{`` and is JSON) or ``pyyaml``. Raises ConfigParseError, nothing else,
    when the text does not parse (and when PyYAML is missing and the text is not JSON).
    ``loader_class``: one of ``YAML_LOADERS`` (default: the first, libyaml when built in)."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except RecursionError:
            raise ConfigParseError("nested more deeply than the JSON reader goes")
        except ValueError:
            pass  # JSON-looking YAML (flow mapping with comments, single quotes...)
        else:
            check_depth(data)
            return data, "json"
    if not HAS_YAML:
        raise ConfigParseError("PyYAML is not installed on this node. " + YAML_INSTALL_HINT)
    loader = (loader_class or YAML_LOADERS[0])(text)
    try:
        return _plain(loader.get_single_data()), "pyyaml"
    except yaml.YAMLError as e:
        message = str(e).replace('in "<unicode string>", line', "at line")
        raise ConfigParseError(" ".join(message.split()))
    except RecursionError:
        raise _nested_too_deep()
    except (ValueError, TypeError, OverflowError) as e:
        if isinstance(e, ConfigParseError):
            raise
        raise ConfigParseError("%s: %s" % (type(e).__name__, e))
    finally:
        loader.dispose()


def require_yaml(module, reason):
    """Fail ``module`` with ``missing_required_lib`` and the install hint when PyYAML is not
    importable by the node's Python."""
    if not HAS_YAML:
        module.fail_json(msg="%s %s." % (missing_required_lib("PyYAML", reason=reason),
                                         YAML_INSTALL_HINT),
                         exception=YAML_IMPORT_ERROR)


def dump_config_yaml(data):
    """Block-style YAML for ``data``: key order kept, nothing folded, UTF-8 written as is."""
    return yaml.dump(data, Dumper=_ConfigDumper, default_flow_style=False, sort_keys=False,
                     allow_unicode=True, width=1 << 30)


def parse_config(text, path):
    """Parse a KubeletConfiguration; return ``(config dict, parser, error, warnings)``."""
    warnings = []
    try:
        data, parser = load_config_text(text)
    except ConfigParseError as e:
        return {}, None, "cannot parse %s: %s" % (path, e), warnings
    if data is None:
        return {}, parser, "%s is empty" % path, warnings
    if not isinstance(data, dict):
        return {}, parser, "%s holds a %s, not a KubeletConfiguration mapping" % (
            path, type(data).__name__), warnings
    kind = data.get("kind")
    if kind is None:
        warnings.append("%s has no 'kind' (the kubelet requires kind: KubeletConfiguration)" % path)
    elif kind != "KubeletConfiguration":
        return data, parser, "%s is a %r, not a KubeletConfiguration" % (path, kind), warnings
    api = data.get("apiVersion")
    if api is not None and not str(api).startswith("kubelet.config.k8s.io/"):
        warnings.append("%s has apiVersion %r (expected kubelet.config.k8s.io/v1beta1)" % (path, api))
    return data, parser, None, warnings
