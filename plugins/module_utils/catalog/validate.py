# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The known-bad catalog's format: version schemes, the one error type and validation.

Runs on the node (kubegpu.fleet.driver_guard validates the catalog it is sent) and on the
controller (``plugins/plugin_utils/catalog/load.py`` validates the bundled files and the task's
``catalog_extra``): Python 3.8+, standard library and ``_common/versions.py`` only.

Format: ``catalog/README.md``; structure: ``catalog/schema/catalog-v2.schema.json``.
``check_structure`` checks every rule of that schema in code (neither side needs
``jsonschema``); ``validate_entry`` and ``validate_catalog`` add what the schema cannot say: every
version parses with the component's version scheme, ranges are ordered and inside their branch,
ids are unique across files and a security entry's severity is the CVSS rating of its highest
base score (``cvss_rating``, the one copy of that rating). Evaluation: ``evaluate.py``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re
import reprlib

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (
    DevicePluginVersion,
    DriverVersion,
    SemVer,
)

SCHEMA_VERSION = 2

# component -> version scheme. The file header must name the same scheme.
COMPONENT_SCHEMES = {
    "driver": "driver",
    "fabric-manager": "driver",
    "container-toolkit": "semver",
    "gpu-operator": "semver",
    "mig-manager": "semver",
    "device-plugin": "device-plugin",
    "dcgm": "semver",
    "dcgm-exporter": "semver",
}

SEVERITIES = ("critical", "high", "medium", "low", "info")

# Condition vocabulary. kind: "bool" (fact is true/false), "enum" (fact is one value or a
# list of values; the condition is a list of accepted values or {not_in: [...]}), "regex"
# (fact is a string or list of strings searched case-insensitively).
CONDITIONS = {
    "mig_enabled": "bool",            # any GPU on the node in MIG mode
    "mig_mixed": "bool",              # MIG GPUs and full GPUs on the same node
    "mig_strategy": "enum",           # device plugin / GFD: none | single | mixed
    "gpu_model": "regex",             # GPU product names (nvidia-smi / NVML)
    "gpu_arch": "enum",               # ampere | hopper | blackwell | grace-hopper | ...
    "injection_mode": "enum",         # container toolkit: legacy | cdi (cdi and jit-cdi -> cdi)
    "cdi_enabled": "bool",            # GPU Operator cdi.enabled / toolkit CDI in use
    "device_list_strategy": "enum",   # device plugin: envvar | volume-mounts | cdi-annotations | cdi-cri
    "runtime": "enum",                # low-level OCI runtime: runc | crun
    "container_runtime": "enum",      # containerd | cri-o | docker
    "k8s_distribution": "enum",       # rke2 | k3s | microk8s | openshift | gke | ...
    "nvswitch": "bool",               # NVSwitch present (HGX/DGX baseboards)
    "fabric_manager_matches_driver": "bool",  # nv-fabricmanager version == driver version
    "kernel_modules": "enum",         # open | proprietary
    "driver_branch": "enum",          # driver branch of the node ("550")
    "driver_preinstalled": "bool",    # host driver, GPU Operator driver.enabled=false
    "os": "enum",                     # <ID><major VERSION_ID>: rhel8, ubuntu22, ...
    "rdma": "bool",                   # ibverbs devices present on the node
    "vgpu_guest": "bool",             # the node is a VM running NVIDIA's vGPU guest driver
}

_DISTRO_SUFFIX = re.compile(r"^(ubuntu|ubi|centos|rhel|rocky|amzn|debian|sles|photon)\d", re.I)


class CatalogError(ValueError):
    """The catalog (or one entry) breaks a rule; the message names the entry and the value.

    ``source`` names the input the problem is in when the caller knows it (``catalog_extra``,
    ``bundled catalog``); the message then reads ``invalid <source>: <problem>``.
    """

    def __init__(self, message, source=None):
        self.source = source
        super(CatalogError, self).__init__(message if source is None else "invalid %s: %s" % (source, message))


def normalize_version_text(scheme, text):
    """Upstream version text from a package or image-tag version.

    ``3:570.172.08-0ubuntu1`` -> ``570.172.08`` (driver); ``v1.17.8-ubuntu20.04`` and
    ``1.17.8-1`` -> ``1.17.8`` (semver and device plugin: the ``v`` prefix goes; a suffix that starts with a digit or names a base image
    is a package revision or image flavour, not a pre-release; ``-rc.1``/``-beta5`` are kept).
    """
    if not isinstance(text, str) or not text.strip():
        raise CatalogError("version must be a non-empty string, got %r" % (text,))
    t = text.strip()
    if scheme == "driver":
        return t
    if re.match(r"^\d+:", t):
        t = t.split(":", 1)[1]
    m = re.match(r"^(v?\d+\.\d+\.\d+)-(.+)$", t)
    if m and (m.group(2)[0].isdigit() or _DISTRO_SUFFIX.match(m.group(2))):
        t = m.group(1)
    if t[:1] in ("v", "V") and t[1:2].isdigit():
        t = t[1:]
    if scheme == "semver" and re.match(r"^\d+\.\d+$", t):
        t += ".0"
    return t


# Parsed versions by (scheme, text): a catalog names the same bounds over and over, and every node's
# evaluation compares with them. Versions are never changed once made; the cache stops growing at
# PARSED_MAX (a long-lived process that parses many node-supplied texts just parses them).
_PARSED = {}
PARSED_MAX = 8192


def parse_version(scheme, text):
    """Parse ``text`` with the scheme's ordering; CatalogError names the bad value."""
    key = (scheme, text) if isinstance(text, str) else None
    if key is not None:
        hit = _PARSED.get(key)
        if hit is not None:
            return hit
    version = _parse_version(scheme, text)
    if key is not None and len(_PARSED) < PARSED_MAX:
        _PARSED[key] = version
    return version


def _parse_version(scheme, text):
    t = normalize_version_text(scheme, text)
    try:
        if scheme == "driver":
            return DriverVersion(t)
        if scheme == "device-plugin":
            return DevicePluginVersion(t)
        if scheme == "semver":
            return SemVer(t)
    except ValueError as exc:
        raise CatalogError(str(exc))
    raise CatalogError("unknown version scheme %r" % (scheme,))


_PARTS = {}


def _parts(version):
    """The dotted parts of a version's text, as a tuple; remembered (up to PARSED_MAX texts): a
    node's version is compared with every affected range of the catalog."""
    text = version.text if hasattr(version, "text") else str(version)
    parts = _PARTS.get(text)
    if parts is None:
        parts = tuple(re.split(r"[.-]", text[1:] if text.startswith("v") else text))
        if len(_PARTS) < PARSED_MAX:
            _PARTS[text] = parts
    return parts


def in_branch(version, branch):
    """True when ``branch`` ("570", "1.17") is a leading dotted prefix of ``version``."""
    if branch is None:
        return True
    want = tuple(str(branch).split("."))
    return _parts(version)[:len(want)] == want


def cvss_rating(score):
    """CVSS v3 qualitative rating of a base score, lower case."""
    if score >= 9.0:
        return "critical"
    if score >= 7.0:
        return "high"
    if score >= 4.0:
        return "medium"
    if score > 0.0:
        return "low"
    return "info"


# --------------------------------------------------------------------------- validation


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 120
_REPR.maxlevel = 3


def short(value):
    """``repr`` of an input value for a message, bounded (a 1 MB string or deep nesting stays short)."""
    return _REPR.repr(value)


_short = short


# Patterns end in \Z, never $ (which also matches before a trailing newline).
# Source URLs: https only, with a host, without credentials, RFC 3986 characters only (no space,
# control, quote, angle bracket, backslash or non-ASCII character: a bidi override cannot hide in
# one), at most URL_MAX characters. The reports make links of these URLs and of nothing else.
URL_MAX = 2048
_URL_CHARS = re.compile(r"^[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+\Z")
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\Z")
_URL_RE = re.compile(r"^https://(?P<host>[^/?#:@]+)(:(?P<port>[0-9]{1,5}))?(?P<rest>[/?#].*)?\Z")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}\Z")
CVE_RE = re.compile(r"^CVE-\d{4}-\d{4,}\Z")
CWE_RE = re.compile(r"^CWE-\d+\Z")
CVSS_VECTOR_RE = re.compile(r"^CVSS:3\.[01]/AV:[NALP]/AC:[LH]/PR:[NLH]/UI:[NR]/S:[UC]/C:[NLH]/I:[NLH]/A:[NLH]\Z")
CVSS_VERSIONS = ("3.0", "3.1")
BRANCH_RE = re.compile(r"^\d+(\.\d+)?\Z")
VERSION_RE = re.compile(r"^v?\d+(\.\d+)+(-[0-9A-Za-z.]+)?\Z")
MAX_DEPTH = 32  # a catalog document nests 7 levels deep; anything deeper is refused before it is walked


def url_problem(url):
    """Why ``url`` is not an acceptable source URL, or None when it is.

    Accepted: ``https://HOST[:PORT][/path][?query][#fragment]`` with a DNS host name, no user
    or password, only RFC 3986 characters, at most URL_MAX characters. The controller, the node
    and the report renderers use this one check.
    """
    if not isinstance(url, str):
        return "must be a string, got %s" % _describe(url)
    if len(url) > URL_MAX:
        return "is longer than %d characters" % URL_MAX
    if not _URL_CHARS.match(url):
        return ("%s has a character outside RFC 3986 (space, control, quote, angle bracket, backslash "
                "or non-ASCII: percent-encode it)" % _short(url))
    m = _URL_RE.match(url)
    if m is None:
        return "%s is not an https:// URL with a host and no user name or password" % _short(url)
    if not _HOST_RE.match(m.group("host")) or len(m.group("host")) > 253:
        return "%s does not name a DNS host" % _short(url)
    if m.group("port") is not None and not 0 < int(m.group("port")) < 65536:
        return "%s has port %s" % (_short(url), m.group("port"))
    return None


def is_safe_url(url):
    """True when ``url`` passes ``url_problem``: the only URLs a report turns into links."""
    return url_problem(url) is None


def is_finite_number(value):
    """An int or float (never a bool) that is neither NaN nor infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_finite(doc, where, max_depth=MAX_DEPTH):
    """Refuse NaN and infinities anywhere in ``doc`` (YAML reads ``.nan``/``.inf``) and nesting
    deeper than ``max_depth``; iterative, so a hostile depth costs no recursion."""
    stack = [(doc, 0, "")]
    while stack:
        value, depth, path = stack.pop()
        if depth > max_depth:
            raise CatalogError("%s: nested deeper than %d levels at %s" % (where, max_depth, path or "/"))
        if isinstance(value, float) and not math.isfinite(value):
            raise CatalogError("%s: %s is %r: numbers must be finite" % (where, path or "/", value))
        if isinstance(value, dict):
            stack.extend((v, depth + 1, "%s/%s" % (path, k if isinstance(k, str) and len(k) <= 64 else _short(k)))
                         for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((v, depth + 1, "%s/%d" % (path, n)) for n, v in enumerate(value))


def _check_conditions(where, conditions):
    if not isinstance(conditions, dict):
        raise CatalogError("%s: conditions must be a mapping, got %s" % (where, _short(conditions)))
    for key, want in conditions.items():
        kind = CONDITIONS.get(key) if isinstance(key, str) else None
        if kind is None:
            raise CatalogError("%s: unknown condition %s (known: %s)"
                               % (where, _short(key), ", ".join(sorted(CONDITIONS))))
        if kind == "bool" and not isinstance(want, bool):
            raise CatalogError("%s: condition %s must be true or false, got %s" % (where, key, _short(want)))
        if kind == "regex":
            if not isinstance(want, str) or not want:
                raise CatalogError("%s: condition %s must be a non-empty regular expression string" % (where, key))
            try:
                re.compile(want)
            except (re.error, RecursionError, OverflowError) as exc:
                raise CatalogError("%s: condition %s: bad regular expression %s: %s" % (where, key, _short(want), exc))
        if kind == "enum":
            values = want.get("not_in") if isinstance(want, dict) else want
            if isinstance(want, dict) and set(want) != {"not_in"}:
                raise CatalogError("%s: condition %s takes a list or {not_in: [...]}, got %s"
                                   % (where, key, _short(want)))
            if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
                raise CatalogError("%s: condition %s needs a non-empty list of non-empty strings, got %s"
                                   % (where, key, _short(want)))


ENTRY_KEYS = ("id", "kind", "title", "description", "cves", "severity", "affected", "conditions",
              "remediation", "mitigation", "notes", "advisory", "sources")
ENTRY_REQUIRED = ("id", "kind", "title", "severity", "affected", "remediation", "sources")
DOC_KEYS = ("schema_version", "component", "version_scheme", "entries", "_path")
ITEM_KEYS = ("branch", "introduced", "last_affected", "fixed", "conditions", "note")
SOURCE_KEYS = ("url", "verified", "what")
CVE_KEYS = ("id", "cwe", "cvss")
CVSS_KEYS = ("version", "base_score", "vector")
ADVISORY_KEYS = ("publisher", "id", "title", "revision", "date")
KINDS = ("security", "defect")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")


def _describe(value):
    if isinstance(value, float):
        return "%s (a number: quote versions in YAML, e.g. \"550.40\")" % (_short(value),)
    return "%s (%s)" % (_short(value), type(value).__name__)


def _unknown_keys(mapping, allowed, where):
    for key in sorted((k for k in mapping if k not in allowed), key=repr):
        raise CatalogError("%s: unknown key %s (allowed: %s)" % (where, _short(key), ", ".join(allowed)))


def _check_string(mapping, key, where, required=False, pattern=None, non_empty=False, expect=None):
    if key not in mapping:
        if required:
            raise CatalogError("%s: missing required key %r" % (where, key))
        return
    value = mapping[key]
    if not isinstance(value, str) or (non_empty and not value.strip()):
        raise CatalogError("%s: %s must be a %sstring, got %s"
                           % (where, key, "non-empty " if non_empty else "", _describe(value)))
    if pattern is not None and not pattern.match(value):
        raise CatalogError("%s: %s %s does not look like %s" % (where, key, _short(value), expect))


def _check_sources(sources, where):
    if not isinstance(sources, list) or not sources or not all(
            isinstance(x, dict) and isinstance(x.get("url"), str) and x["url"].strip() for x in sources):
        raise CatalogError("%s: every entry needs at least one source (a list of mappings with a url), got %s"
                           % (where, _describe(sources)))
    for n, src in enumerate(sources):
        sw = "%s sources[%d]" % (where, n)
        _unknown_keys(src, SOURCE_KEYS, sw)
        problem = url_problem(src["url"])
        if problem:
            raise CatalogError("%s: url %s" % (sw, problem))
        _check_string(src, "verified", sw, required=True, pattern=DATE_RE, expect="a date (YYYY-MM-DD)")
        _check_string(src, "what", sw)


def _check_cves(cves, where):
    if not isinstance(cves, list) or not all(
            isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("cvss"), dict)
            and isinstance(c["cvss"].get("vector"), str) for c in cves):
        raise CatalogError("%s: cves must be a list of {id, cvss: {version, base_score, vector}}, got %s"
                           % (where, _describe(cves)))
    for n, cve in enumerate(cves):
        cw = "%s cves[%d]" % (where, n)
        _unknown_keys(cve, CVE_KEYS, cw)
        _check_string(cve, "id", cw, pattern=CVE_RE, expect="a CVE id (CVE-2025-23266)")
        _check_string(cve, "cwe", cw, pattern=CWE_RE, expect="a CWE id (CWE-426)")
        cvss = cve["cvss"]
        _unknown_keys(cvss, CVSS_KEYS, cw + " cvss")
        if cvss.get("version") not in CVSS_VERSIONS:
            raise CatalogError("%s: cvss version must be \"3.0\" or \"3.1\" (a quoted string), got %s"
                               % (cw, _describe(cvss.get("version"))))
        score = cvss.get("base_score")
        if not is_finite_number(score) or not 0 <= score <= 10:
            raise CatalogError("%s: cvss base_score must be a finite number from 0 to 10, got %s"
                               % (cw, _describe(score)))
        _check_string(cvss, "vector", cw + " cvss", pattern=CVSS_VECTOR_RE, expect="a CVSS v3 vector")


def _check_advisory(advisory, where):
    if not isinstance(advisory, dict):
        raise CatalogError("%s: advisory must be a mapping {id, revision, date, ...}, got %s"
                           % (where, _describe(advisory)))
    aw = where + " advisory"
    _unknown_keys(advisory, ADVISORY_KEYS, aw)
    for key in ("publisher", "title"):
        _check_string(advisory, key, aw)
    for key in ("id", "revision"):
        _check_string(advisory, key, aw, required=True)
    _check_string(advisory, "date", aw, required=True, pattern=DATE_RE, expect="a date (YYYY-MM-DD)")


def check_structure(entry, where):
    """Every rule of ``catalog/schema/catalog-v2.schema.json`` for one entry, in code.

    Needs no ``jsonschema`` (the node has none; the controller may not): types, allowed keys,
    patterns (ids, CVE and CWE ids, CVSS vectors, dates, branches, versions), https-only source
    URLs (``url_problem``), finite CVSS base scores in 0..10. Raises CatalogError naming the
    entry and the bad value; runs before the semantic rules so a malformed site-local entry
    (``catalog_extra``) fails with a message, never a traceback.
    """
    if not isinstance(entry, dict):
        raise CatalogError("%s: an entry must be a mapping, got %s" % (where, _describe(entry)))
    eid = entry.get("id")
    if not isinstance(eid, str) or not ID_RE.match(eid) or len(eid) > 200:
        raise CatalogError("%s: id must be lower case letters, digits, '.', '_' or '-' (at most 200), got %s"
                           % (where, _describe(eid)))
    where = "entry %s" % eid
    _unknown_keys(entry, ENTRY_KEYS, where)
    for key in ENTRY_REQUIRED:
        if key not in entry:
            raise CatalogError("%s: missing required key %r" % (where, key))
    if entry["kind"] not in KINDS:
        raise CatalogError("%s: kind must be security or defect, got %s" % (where, _short(entry["kind"])))
    for key in ("title", "remediation"):
        if not (isinstance(entry[key], str) and entry[key].strip()):
            raise CatalogError("%s: %s must be a non-empty string, got %s" % (where, key, _describe(entry[key])))
    for key in ("description", "mitigation", "notes"):
        _check_string(entry, key, where)
    if entry["severity"] not in SEVERITIES:
        raise CatalogError("%s: severity %s is not one of %s" % (where, _short(entry["severity"]), ", ".join(SEVERITIES)))
    _check_sources(entry["sources"], where)
    if entry["kind"] == "defect" and "cves" in entry:
        raise CatalogError("%s: a defect entry carries no CVEs (make it kind: security)" % where)
    if entry["kind"] == "security":
        if not entry.get("cves"):
            raise CatalogError("%s: a security entry needs at least one CVE" % where)
        if "advisory" not in entry:
            raise CatalogError("%s: a security entry needs its advisory {id, revision, date}" % where)
    _check_cves(entry.get("cves") or [], where)
    if "advisory" in entry:
        _check_advisory(entry["advisory"], where)
    items = entry["affected"]
    if not isinstance(items, list) or not items:
        raise CatalogError("%s: affected must be a non-empty list, got %s" % (where, _describe(items)))
    for n, item in enumerate(items):
        iw = "%s affected[%d]" % (where, n)
        if not isinstance(item, dict):
            raise CatalogError("%s: must be a mapping, got %s" % (iw, _describe(item)))
        _unknown_keys(item, ITEM_KEYS, iw)
        if not item:
            raise CatalogError("%s: an empty item would match every version" % iw)
        if "branch" in item and not (isinstance(item["branch"], str) and BRANCH_RE.match(item["branch"])):
            raise CatalogError("%s: branch must be a quoted string (\"570\", \"1.17\"), got %s"
                               % (iw, _describe(item["branch"])))
        for key in ("introduced", "last_affected", "fixed"):
            if key not in item:
                continue
            if not isinstance(item[key], str):
                raise CatalogError("%s: %s must be a quoted string, got %s (YAML reads 550.40 as a number)"
                                   % (iw, key, _describe(item[key])))
            if not VERSION_RE.match(item[key]):
                raise CatalogError("%s: cannot parse %s %s (expected a version such as \"570.172.08\" or \"1.17.8\")"
                                   % (iw, key, _short(item[key])))
        _check_string(item, "note", iw)
        if "conditions" in item:
            _check_conditions(iw, item["conditions"])
    if "conditions" in entry:
        _check_conditions(where, entry["conditions"])


def validate_entry(entry, scheme):
    """Shape and semantic rules for one entry; raises CatalogError."""
    check_structure(entry, "entry")
    eid = entry.get("id", "?")
    where = "entry %s" % eid
    kind = entry.get("kind")
    cves = entry.get("cves") or []
    if kind == "security":
        if not cves:
            raise CatalogError("%s: a security entry needs at least one CVE" % where)
        top = max(float(c["cvss"]["base_score"]) for c in cves)
        if entry.get("severity") != cvss_rating(top):
            raise CatalogError("%s: severity %r does not match the highest CVSS base score %s (%s)"
                               % (where, entry.get("severity"), top, cvss_rating(top)))
    elif kind == "defect":
        if cves:
            raise CatalogError("%s: a defect entry carries no CVEs (make it kind: security)" % where)
    else:
        raise CatalogError("%s: kind must be security or defect, got %r" % (where, kind))
    if not entry.get("sources"):
        raise CatalogError("%s: every entry needs at least one source" % where)
    items = entry.get("affected") or []
    if not items:
        raise CatalogError("%s: affected is empty" % where)
    for n, item in enumerate(items):
        iw = "%s affected[%d]" % (where, n)
        branch = item.get("branch")
        bounds = {}
        for key in ("introduced", "last_affected", "fixed"):
            if item.get(key) is None:
                continue
            if not isinstance(item[key], str):
                raise CatalogError("%s: %s must be a quoted string, got %s (YAML reads 550.40 as a number)"
                                   % (iw, key, _short(item[key])))
            v = parse_version(scheme, item[key])
            if not in_branch(v, branch):
                raise CatalogError("%s: %s %s is not in branch %s" % (iw, key, item[key], branch))
            bounds[key] = v
        lo, last, fixed = bounds.get("introduced"), bounds.get("last_affected"), bounds.get("fixed")
        if lo is not None and last is not None and not lo <= last:
            raise CatalogError("%s: introduced %s is above last_affected %s" % (iw, lo, last))
        if lo is not None and fixed is not None and not lo < fixed:
            raise CatalogError("%s: introduced %s is not below fixed %s" % (iw, lo, fixed))
        if last is not None and fixed is not None and not last < fixed:
            raise CatalogError("%s: last_affected %s is not below fixed %s" % (iw, last, fixed))
        if lo is None and last is None and fixed is None and branch is None and not item.get("conditions") \
                and not entry.get("conditions"):
            raise CatalogError("%s: an item without bounds, branch or conditions would match every version" % iw)


def _doc_where(doc):
    path = doc.get("_path", "?") if isinstance(doc, dict) else "?"
    return path if isinstance(path, str) and len(path) <= 300 else _short(path)


def validate_catalog(docs):
    """Validate a list of loaded component documents; returns the flat entry list.

    Raises CatalogError on the first broken rule (ids unique across all files). Every rule of
    the JSON schema is checked here (``check_structure``), NaN and infinities anywhere are
    refused (``check_finite``): nothing depends on ``jsonschema`` being installed.
    """
    seen = {}
    entries = []
    for doc in docs:
        where = "catalog file %s" % _doc_where(doc)
        if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION \
                or isinstance(doc.get("schema_version"), bool):
            raise CatalogError("%s: schema_version must be %d" % (where, SCHEMA_VERSION))
        check_finite(doc, where)
        comp = doc.get("component")
        scheme = COMPONENT_SCHEMES.get(comp) if isinstance(comp, str) else None
        if scheme is None:
            raise CatalogError("%s: unknown component %s" % (where, _short(comp)))
        if doc.get("version_scheme") != scheme:
            raise CatalogError("%s: component %s uses version_scheme %s, not %s"
                               % (where, comp, scheme, _short(doc.get("version_scheme"))))
        for key in sorted((k for k in doc if k not in DOC_KEYS), key=repr):
            raise CatalogError("%s: unknown top-level key %s" % (where, _short(key)))
        doc_entries = doc.get("entries")
        if not isinstance(doc_entries, list) or not doc_entries:
            raise CatalogError("%s: entries must be a non-empty list, got %s" % (where, _describe(doc_entries)))
        for n, entry in enumerate(doc_entries):
            check_structure(entry, "%s entries[%d]" % (where, n))
            eid = entry.get("id")
            if eid in seen:
                raise CatalogError("duplicate entry id %r (in %s and %s)" % (eid, seen[eid], comp))
            seen[eid] = comp
            validate_entry(entry, scheme)
            flat = dict(entry)
            flat["component"] = comp
            entries.append(flat)
    return entries


def document_list(value, source):
    """A list of catalog documents from ``value`` (one document or a list of them).

    ``catalog_extra`` takes documents shaped like a file in ``catalog/v2/``; anything else is a
    CatalogError naming ``source``.
    """
    if value is None:
        return []
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise CatalogError("must be a catalog v2 document or a list of them, got %s" % _describe(value), source)
    for n, doc in enumerate(value):
        if not isinstance(doc, dict) or "schema_version" not in doc:
            raise CatalogError(
                "item %d is not a catalog v2 document: %s takes documents shaped like a file in "
                "catalog/v2/ (schema_version: 2, component, version_scheme, entries), see "
                "catalog/README.md section catalog_extra" % (n, source), source)
    return value


def validate_documents(docs, source="catalog"):
    """Validate ``docs`` (one document or a list) as ``source``; return the flat entry list.

    A problem is a CatalogError whose message starts ``invalid <source>: ``.
    """
    docs = document_list(docs, source)
    try:
        return validate_catalog([dict(d) for d in docs])
    except CatalogError as e:
        if e.source is not None:
            raise
        raise CatalogError(str(e), source)
