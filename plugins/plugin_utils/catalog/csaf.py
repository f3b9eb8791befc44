# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA CSAF 2.0 advisories -> catalog v2 entries: the one importer.

Two callers share it: the maintainer's ``scripts/import_csaf.py`` (regenerates and checks the
bundled ``catalog/v2``) and the ``kubegpu.fleet.catalog_refresh`` action (a user's overlay from
NVIDIA's repository or a mirror, ``refresh.py``).

NVIDIA publishes every PSIRT bulletin as a CSAF 2.0 document (``<year>/<a_id>/<a_id>.json``
in the NVIDIA/product-security repository). This module reads the parts of the format that
carry facts the catalog needs:

* ``product_tree``: NVIDIA nests ``vendor > architecture ("Linux(R570)") > product_version``
  where the branch *name* is the product ("Tesla", "NVIDIA Container Toolkit") and
  ``product.name`` is the version text ("All driver versions prior to 570.133.07",
  "All versions up to and including 1.17.7 (CDI mode only ...)", "1.17.8"). The standard
  ``vendor > product_name > product_version`` layout and ``relationships`` are read too.
* ``vulnerabilities[]``: ``cve``, ``cwe``, ``scores[].cvss_v3`` (base score, vector),
  ``product_status`` (``known_affected``/``fixed``/``first_fixed``/``last_affected``),
  ``remediations`` (``vendor_fix``/``mitigation``/``workaround``, when present; NVIDIA's
  current documents have none).

The Linux rows of the components on a Kubernetes GPU node become entries (driver "Tesla" rows
per branch, vGPU guest-driver rows per branch with the condition ``vgpu_guest: true``,
container toolkit, GPU Operator, device plugin, MIG manager, fabric manager, DCGM, DCGM
Exporter); every other row (GeForce, RTX/Quadro, Cloud Gaming, Virtual GPU Manager, Windows,
...) is listed in ``skipped`` with the reason (``NOT_IMPORTED``), and a product in neither
table is an error. One entry per CVE and component, with one affected item per driver branch
(and per guest-driver branch). Row qualifiers that the format cannot
carry ("only when CDI is enabled") go to ``notes`` and to ``warnings``: the maintainer turns
them into structured conditions when reviewing.

Nothing in a document is trusted: ``parse_json`` parses under ``plugin_utils/parse_bound.py``
(size MAX_BYTES, nesting MAX_DEPTH, UTF-8, then no NaN/Infinity anywhere), every field is type-checked where
it is read (a wrong type is a CsafError naming the field), and its callers
(``scripts/import_csaf.py``, ``refresh.py``) put a wall-clock bound (``deadline``, DEADLINE) around
each document. ``combine`` keeps one entry per id across
documents (the newer revision of one bulletin wins; a CVE that two bulletins list is merged,
see ``merge_advisories``); ``plan_merge`` builds and validates the merged catalog in memory,
with the audit's own reader and validator, before anything is written, and ``write_files``
writes each changed file through ``module_utils/_common/fileutil.py``.

CLI: ``scripts/import_csaf.py`` (see catalog/README.md).
"""
from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import signal
import stat
import threading
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import evaluate as catalog_evaluate
from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog import validate as catalog_validate
from ansible_collections.kubegpu.fleet.plugins.plugin_utils import parse_bound
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.catalog import load as catalog_load

try:  # optional: validates that each vector really scores the base score NVIDIA printed
    from cvss import CVSS3
except ImportError:  # pragma: no cover - the importer still works without it
    CVSS3 = None

# component, product-name regex, architecture regex (driver: group 1 is the branch)
ROWS = (
    ("driver", re.compile(r"^(Tesla|Data ?Center( GPU)?( Driver)?)$", re.I),
     re.compile(r"^Linux\s*\(R(\d+)\)$", re.I)),
    ("container-toolkit", re.compile(r"^NVIDIA Container Toolkit$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("gpu-operator", re.compile(r"^NVIDIA GPU Operator$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("device-plugin", re.compile(r"^NVIDIA (Kubernetes|K8s) Device Plugin$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("mig-manager", re.compile(r"^NVIDIA MIG Manager$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    ("fabric-manager", re.compile(r"^NVIDIA Fabric ?Manager$", re.I), re.compile(r"^(Linux|All|)$", re.I)),
    # DCGM rows name the release line in the architecture ("All(4.5)"); the versions carry it too
    ("dcgm", re.compile(r"^(NVIDIA )?(DCGM|Data Center GPU Manager)$", re.I),
     re.compile(r"^(Linux|All|)(\s*\(\d+(\.\d+)*\))?$", re.I)),
    ("dcgm-exporter", re.compile(r"^(NVIDIA )?DCGM[ -]Exporter$", re.I),
     re.compile(r"^(Linux|All|)(\s*\(\d+(\.\d+)*\))?$", re.I)),
)

# vGPU guest-driver rows (NVIDIA vGPU software's Linux guest driver, run by a VM with a vGPU):
# driver entries whose items hold only where the node runs that driver (``vgpu_guest: true``).
# The architecture names the branch ("Linux(R570 vGPU 18)", "Linux(R535)"), or only the vGPU
# release ("Linux(vGPU 19)", bulletin 5861): then the branch is the major of the row's version.
GUEST_PRODUCT = re.compile(r"^(Guest driver|vGPU software \(guest driver\))$", re.I)
GUEST_ARCH = re.compile(r"^Linux\s*\((?:R(\d+))?\s*(?:vGPU(?: software)?\s*\d*)?\s*\)$", re.I)
GUEST_KEY = "guest:"
GUEST_CONDITIONS = {"vgpu_guest": True}
# "450.172.01(All versions prior to and including vGPU 11.7)": the version is the last affected
_GUEST_UPTO = re.compile(r"^All versions (?:prior to and including|up to and including)\b", re.I)

# Products NVIDIA's bulletins cover that are not catalog components, each with the reason the
# importer gives for not importing its rows. A product name in neither ROWS nor this table is
# an error: a person decides whether it is a new component or one more product to leave out.
NOT_IMPORTED = (
    (re.compile(r"^(GeForce|Studio|NVS|(NVIDIA )?RTX|(NVIDIA )?Quadro|(NVIDIA )?RTX ?PRO|GeForce, NVIDIA RTX/Quadro, NVS|"
                r"NVIDIA RTX/ ?Quadro, NVS|NVIDIA RTX, Quadro, NVS|NVIDIA RTX PRO, RTX, Quadro)$", re.I),
     "GeForce/RTX/Quadro/NVS/Studio driver rows: data-center GPU nodes run the data-center (Tesla) driver rows"),
    (re.compile(r"^(NVIDIA Cloud Gaming ?\(guest driver\)|Cloud Gaming Guest Driver)$", re.I),
     "Cloud Gaming guest driver rows: a driver for cloud gaming VMs, not for Kubernetes GPU nodes"),
    (re.compile(r"^(Virtual GPU Manager|vGPU software \(Virtual GPU Manager\)|NVIDIA Cloud Gaming ?\(Virtual GPU Manager\)|"
                r"Cloud Gaming Virtual GPU Manager)$", re.I),
     "vGPU host software (Virtual GPU Manager): runs on the hypervisor, not on a Kubernetes node"),
    (re.compile(r"^((NVIDIA )?CUDA Toolkit|nvJPEG|nvJPEG2000 Library|nvTIFF Library)$", re.I),
     "CUDA Toolkit and its libraries: shipped inside application images, not a node component the audit versions"),
    (re.compile(r"^NVIDIA KAI Scheduler$", re.I),
     "KAI Scheduler: a cluster scheduler, not a catalog component"),
    (re.compile(r"^(BlueField .*|ConnectX.*|Mellanox (DPDK|OFED).*|Upstream DPDK|NVIDIA DOCA.*|Cumulus Linux|NVOS)$", re.I),
     "networking software and firmware (DOCA, OFED, DPDK, NIC/DPU/switch): not a catalog component"),
    (re.compile(r"^(HGX.*|Hopper HGX.*|DGX.*)$", re.I),
     "HGX/DGX firmware (HMC, BMC, VBIOS, NVSwitch): firmware is not a catalog component"),
)
WINDOWS_ARCH = re.compile(r"^Windows", re.I)

ID_PREFIX = {
    "driver": "driver", "container-toolkit": "ctk", "gpu-operator": "gpu-operator",
    "device-plugin": "device-plugin", "mig-manager": "mig-manager", "fabric-manager": "fabric-manager",
    "dcgm": "dcgm", "dcgm-exporter": "dcgm-exporter",
}

_V = r"v?(\d+(?:\.\d+)+(?:-[0-9A-Za-z.]+)?)"
_PRIOR = re.compile(r"^All (?:drivers? )?versions? prior to " + _V + r"\s*(?:\((.*)\))?$", re.I)
_UPTO = re.compile(r"^All (?:drivers? )?versions? (?:up to and including|prior to and including) " + _V
                   + r"\s*(?:\((.*)\))?$", re.I)
_EXACT = re.compile(r"^" + _V + r"\s*(?:\((.*)\))?$")
# "0.0  to 4.5.2" (a range, both ends affected) and "2.3.4 and 2.3.5 (latest)" (fixed releases)
_RANGE = re.compile(r"^" + _V + r"\s+to\s+" + _V + r"\s*(?:\((.*)\))?$", re.I)
_AND = re.compile(r"^" + _V + r"(?:\s*(?:,|and)\s*" + _V + r")+\s*(?:\((.*)\))?$", re.I)
_ZERO = re.compile(r"^0+(\.0+)*$")
_TAG = re.compile(r"<[^>]+>")


MAX_BYTES = 8 << 20  # NVIDIA's largest bulletins are a few hundred KiB
MAX_DEPTH = 32       # a CSAF document nests about 12 levels deep
DEADLINE = 30.0      # seconds per document (read, parse, convert)
ADVISORY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
CVE_ID = re.compile(r"^CVE-\d{4}-\d{4,}\Z")


class CsafError(ValueError):
    """The document is not a CSAF advisory this importer can read; the message says why.

    ``path``: the file the problem is in, where the raiser knows it (``combine``)."""

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


def _kind(value):
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _obj(value, where, optional=False):
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise CsafError("%s must be an object, got %s" % (where, _kind(value)))
    return value


def _arr(value, where):
    if value is None:
        return []
    if not isinstance(value, list):
        raise CsafError("%s must be an array, got %s" % (where, _kind(value)))
    return value


def _str(value, where, default=""):
    if value is None:
        return default
    if not isinstance(value, str):
        raise CsafError("%s must be a string, got %s" % (where, _kind(value)))
    return value


def _refuse_constant(name):
    raise CsafError("%s is not JSON (RFC 8259 has no NaN or Infinity)" % name)


def check_depth(value, max_depth=MAX_DEPTH):
    """Refuse nesting deeper than ``max_depth``; iterative, so a hostile depth costs no recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise CsafError("nested deeper than %d levels" % max_depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _refuse_non_finite(doc):
    """No NaN or Infinity anywhere (RFC 8259 has neither; Python's json reads them)."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            _refuse_constant({"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(repr(item), repr(item)))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_json(data):
    """``bytes`` of a CSAF document -> the document, parsed under ``parse_bound.load_json``: UTF-8
    (a BOM is dropped), at most MAX_BYTES, at most MAX_DEPTH levels, strict JSON (no NaN or
    Infinity). Raises CsafError naming the problem."""
    if isinstance(data, (bytes, bytearray)) and data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    try:
        doc = parse_bound.load_json(data, "the CSAF document", max_bytes=MAX_BYTES, max_nesting=MAX_DEPTH)
    except parse_bound.ShapeError as exc:
        if "nested" in str(exc):
            raise CsafError("nested deeper than %d levels" % MAX_DEPTH)
        raise CsafError("larger than %d bytes" % MAX_BYTES if "bytes" in str(exc) else str(exc))
    except parse_bound.ParseError as exc:
        raise CsafError(str(exc).replace("the CSAF document is not valid JSON", "not JSON")
                        .replace("the CSAF document is not UTF-8", "not UTF-8"))
    check_depth(doc)
    _refuse_non_finite(doc)
    return doc


def read_document(path):
    """Read and parse one CSAF file: a regular file (never a FIFO or device), at most MAX_BYTES."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CsafError("not a regular file")
        if st.st_size > MAX_BYTES:
            raise CsafError("larger than %d bytes (%d)" % (MAX_BYTES, st.st_size))
        data = fileutil.read_fd(fd, MAX_BYTES)
    finally:
        os.close(fd)
    return parse_json(data)


class UnknownProduct(CsafError):
    """A product in neither ROWS nor NOT_IMPORTED (``classify``)."""


class DeadlineExceeded(Exception):
    """A document took longer than its wall-clock budget."""


@contextlib.contextmanager
def deadline(seconds):
    """Raise DeadlineExceeded in the block after ``seconds`` (SIGALRM; a no-op off the main thread).

    An alarm already armed (Ansible's task ``timeout:`` in the worker that runs the refresh
    action) is kept: when it is due first, this deadline stands aside and lets it fire; otherwise
    it is re-armed with its remaining time afterwards."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    outer, _interval = signal.getitimer(signal.ITIMER_REAL)
    if outer and outer <= seconds:
        yield
        return

    def expire(_signum, _frame):
        raise DeadlineExceeded("took longer than %.0f s" % seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 0.001))


class _Quoted(str):
    """A string the YAML dumper writes in double quotes (versions, dates)."""


def _text(html):
    return re.sub(r"\s+", " ", _TAG.sub(" ", html or "")).strip()


def product_rows(doc):
    """product_id -> {"product": name, "arch": architecture, "version_text": text}."""
    tree = doc.get("product_tree")
    if not isinstance(tree, dict):
        raise CsafError("no product_tree in the document")
    rows = {}

    def walk(branches, product_name, arch, where, depth):
        if depth > MAX_DEPTH:
            raise CsafError("%s: nested deeper than %d levels" % (where, MAX_DEPTH))
        for n, b in enumerate(_arr(branches, where)):
            bw = "%s[%d]" % (where, n)
            _obj(b, bw)
            cat, name = b.get("category"), _str(b.get("name"), bw + ".name")
            pn = name if cat == "product_name" else product_name
            ar = name if cat == "architecture" else arch
            prod = _obj(b.get("product"), bw + ".product", optional=True)
            pid = prod.get("product_id")
            if pid:
                pid = _str(pid, bw + ".product.product_id")
                if cat == "product_version" and product_name is None:
                    # NVIDIA layout: the branch names the product, product.name the version text
                    rows[pid] = {"product": name, "arch": ar or "",
                                 "version_text": _str(prod.get("name"), bw + ".product.name")}
                elif cat == "product_version":
                    rows[pid] = {"product": product_name, "arch": ar or "", "version_text": name}
            walk(b.get("branches"), pn, ar, bw + ".branches", depth + 1)

    walk(tree.get("branches"), None, None, "product_tree.branches", 0)
    for n, rel in enumerate(_arr(tree.get("relationships"), "product_tree.relationships")):
        rw = "product_tree.relationships[%d]" % n
        _obj(rel, rw)
        src = rows.get(_str(rel.get("product_reference"), rw + ".product_reference"))
        full = _obj(rel.get("full_product_name"), rw + ".full_product_name", optional=True)
        if src and full.get("product_id"):
            rows[_str(full["product_id"], rw + ".full_product_name.product_id")] = dict(src)
    return rows


def classify(row):
    """``(component, branch)`` for a row the catalog imports, ``(None, reason)`` for a row of a
    product it leaves out (NOT_IMPORTED, Windows rows); raises CsafError for a product or
    architecture this importer does not know."""
    product, arch = (row.get("product") or "").strip(), (row.get("arch") or "").strip()
    if GUEST_PRODUCT.match(product):
        return _classify_guest(row, product, arch)
    for component, prod_re, arch_re in ROWS:
        if prod_re.match(product):
            m = arch_re.match(arch)
            if m:
                return component, (m.group(1) if component == "driver" else None)
            if WINDOWS_ARCH.match(arch):
                return None, "Windows rows: Kubernetes GPU nodes run Linux"
            raise CsafError("product %s: unknown architecture %s (not a Linux row this importer reads): add it to "
                            "ROWS or NOT_IMPORTED in plugins/plugin_utils/catalog/csaf.py"
                            % (catalog_validate.short(product), catalog_validate.short(arch)))
    for prod_re, reason in NOT_IMPORTED:
        if prod_re.match(product):
            return None, reason
    raise UnknownProduct("unknown product %s (architecture %s): neither a catalog component nor a product the "
                         "importer leaves out; add it to ROWS or NOT_IMPORTED in plugins/plugin_utils/catalog/csaf.py"
                         % (catalog_validate.short(product), catalog_validate.short(arch)))


def _classify_guest(row, product, arch):
    """A vGPU guest-driver row: ``("driver", "guest:<branch>")``; Windows and Cloud Gaming rows
    are not imported (``(None, reason)``)."""
    if WINDOWS_ARCH.match(arch):
        return None, "Windows rows: Kubernetes GPU nodes run Linux"
    if re.search(r"gaming", arch, re.I):
        return None, "Cloud Gaming guest driver rows: a driver for cloud gaming VMs, not for Kubernetes GPU nodes"
    m = GUEST_ARCH.match(arch)
    if not m:
        raise CsafError("product %s: unknown architecture %s (not a Linux row this importer reads): add it to "
                        "GUEST_ARCH or NOT_IMPORTED in plugins/plugin_utils/catalog/csaf.py"
                        % (catalog_validate.short(product), catalog_validate.short(arch)))
    branch = m.group(1)
    if not branch:
        first = re.search(r"(\d+)\.\d+", _str(row.get("version_text"), "a guest row's version text"))
        if not first:
            raise CsafError("product %s, architecture %s: no branch in the architecture and no version in %s"
                            % (catalog_validate.short(product), catalog_validate.short(arch),
                               catalog_validate.short(row.get("version_text"))))
        branch = first.group(1)
    return "driver", GUEST_KEY + branch


UNKNOWN_PRODUCT_REASON = "a product that is not a component of a Kubernetes GPU node the catalog knows"


def _classify(row, unknown_products):
    try:
        return classify(row)
    except UnknownProduct:
        if unknown_products != "skip":
            raise
        return None, UNKNOWN_PRODUCT_REASON


def parse_row_version(text, status):
    """Version bounds of one product_status row: one of ``before``, ``last_affected`` (with
    ``introduced`` for a range), ``exact`` (the lowest of a list of releases), and
    ``qualifier``."""
    t = _str(text, "a %s row's version text" % status).strip()
    for rx, key in ((_PRIOR, "before"), (_UPTO, "last_affected"), (_EXACT, "exact")):
        m = rx.match(t)
        if m:
            return {key: m.group(1), "qualifier": (m.group(2) or "").strip() or None}
    m = _RANGE.match(t)
    if m:
        out = {"last_affected": m.group(2), "qualifier": (m.group(3) or "").strip() or None}
        if not _ZERO.match(m.group(1)):
            out["introduced"] = m.group(1)
        return out
    m = _AND.match(t)
    if m:
        qualifier = (m.group(m.lastindex) or "").strip() if m.lastindex and m.lastindex > 2 else ""
        listed = re.findall(_V, t.split("(", 1)[0])
        return {"exact": listed[0], "listed": listed,
                "qualifier": None if qualifier.lower() in ("", "latest") else qualifier}
    raise CsafError("cannot read the version text %s of a %s row (expected 'All versions prior to X', "
                    "'All versions up to and including X', 'X to Y', 'X and Y' or a version)"
                    % (catalog_validate.short(text), status))


def _order(component, text):
    return catalog_validate.parse_version(catalog_validate.COMPONENT_SCHEMES[component], text)


def _version(component, text):
    scheme = catalog_validate.COMPONENT_SCHEMES[component]
    return catalog_validate.normalize_version_text(scheme, text)


def _score(vuln, product_ids, problems):
    cve = vuln["cve"]
    chosen = None
    for n, sc in enumerate(_arr(vuln.get("scores"), "%s scores" % cve)):
        _obj(sc, "%s scores[%d]" % (cve, n))
        if "cvss_v3" not in sc:
            continue
        products = set(p for p in _arr(sc.get("products"), "%s scores[%d].products" % (cve, n)) if isinstance(p, str))
        if chosen is None or products & product_ids:
            chosen = _obj(sc["cvss_v3"], "%s scores[%d].cvss_v3" % (cve, n))
            if products & product_ids:
                break
    if chosen is None:
        raise CsafError("%s has no cvss_v3 score" % cve)
    score = chosen.get("baseScore")
    if not catalog_validate.is_finite_number(score) or not 0 <= score <= 10:
        raise CsafError("%s: cvss_v3.baseScore must be a number from 0 to 10, got %s" % (cve, catalog_validate.short(score)))
    score = float(score)
    vector = _str(chosen.get("vectorString"), "%s cvss_v3.vectorString" % cve)
    if not catalog_validate.CVSS_VECTOR_RE.match(vector):
        raise CsafError("%s: CVSS vector %s does not parse" % (cve, catalog_validate.short(vector)))
    if CVSS3 is not None:
        try:
            computed = float(CVSS3(vector).base_score)
        except Exception as exc:  # the cvss library raises its own error classes
            raise CsafError("%s: CVSS vector %r does not parse: %s" % (cve, vector, exc))
        if computed != score:
            problems.append("%s: vector %s scores %s, the document says %s" % (cve, vector, computed, score))
    version = _str(chosen.get("version"), "%s cvss_v3.version" % cve) or vector.split("/")[0].split(":")[1]
    return {"version": _Quoted(version), "base_score": score, "vector": vector}


def _remediation_texts(vuln, product_ids):
    fix, mitig = [], []
    for n, r in enumerate(_arr(vuln.get("remediations"), "%s remediations" % vuln["cve"])):
        rw = "%s remediations[%d]" % (vuln["cve"], n)
        _obj(r, rw)
        if not set(p for p in _arr(r.get("product_ids"), rw + ".product_ids") if isinstance(p, str)) & product_ids:
            continue
        text = _text(_str(r.get("details"), rw + ".details"))
        if r.get("url"):
            text += " (%s)" % _str(r["url"], rw + ".url")
        if r.get("category") == "vendor_fix":
            fix.append(text)
        elif r.get("category") in ("mitigation", "workaround"):
            mitig.append(text)
    return fix, mitig


def source_urls(doc, path=None):
    """NVIDIA's bulletin page and, where the input path shows it, the CSAF file's URL."""
    aid = str(doc["document"]["tracking"]["id"])
    urls = ["https://nvidia.custhelp.com/app/answers/detail/a_id/%s" % aid]
    m = re.search(r"(\d{4})/(\d+)/(\d+)\.json$", path or "")
    if m:
        urls.append("https://github.com/NVIDIA/product-security/blob/main/%s/%s/%s.json" % m.groups())
        return urls
    # NVIDIA files each bulletin under the year of its initial release (true of all 47 in
    # ../shared/reference/nvidia-csaf, whose README names each file's path in the repository)
    initial = doc["document"]["tracking"].get("initial_release_date")
    y = re.match(r"(\d{4})-\d\d-\d\d", initial) if isinstance(initial, str) else None
    if y and aid.isdigit() and re.search(r"(^|/)%s\.json$" % re.escape(aid), path or ""):
        urls.append("https://github.com/NVIDIA/product-security/blob/main/%s/%s/%s.json" % (y.group(1), aid, aid))
    return urls


def import_advisory(doc, path=None, verified=None, unknown_products="error"):
    """Turn one CSAF document into catalog v2 entries.

    Returns {"advisory": {...}, "entries": {component: [entry, ...]}, "skipped": [{"product_id",
    "product", "arch", "version_text", "reason"}, ...] (every product row not imported, with the
    reason), "warnings": [...]}. Raises CsafError when the document cannot be read or names a
    product the importer does not know (``classify``).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("document"), dict):
        raise CsafError("not a CSAF document (no 'document' object)")
    check_depth(doc)
    meta = doc["document"]
    if str(meta.get("csaf_version")) != "2.0":
        raise CsafError("csaf_version is %s; this importer reads CSAF 2.0" % catalog_validate.short(meta.get("csaf_version")))
    if meta.get("category") not in ("csaf_security_advisory", "csaf_vex", "csaf_base"):
        raise CsafError("document category %s is not an advisory" % catalog_validate.short(meta.get("category")))
    tracking = _obj(meta.get("tracking"), "document.tracking", optional=True)
    if not tracking.get("id"):
        raise CsafError("document.tracking.id is missing")
    if isinstance(tracking["id"], bool) or not isinstance(tracking["id"], (str, int)) \
            or not ADVISORY_ID.match(str(tracking["id"])):
        raise CsafError("document.tracking.id %s is not an advisory id (letters, digits, '.', '_', '-')"
                        % catalog_validate.short(tracking["id"]))
    revision = tracking.get("version", "")
    if isinstance(revision, bool) or not isinstance(revision, (str, int)):
        raise CsafError("document.tracking.version must be a string, got %s" % _kind(revision))
    verified = verified or datetime.date.today().isoformat()
    advisory = {
        "publisher": _str(_obj(meta.get("publisher"), "document.publisher", optional=True).get("name"),
                          "document.publisher.name"),
        "id": _Quoted(str(tracking["id"])),
        "title": _str(meta.get("title"), "document.title"),
        "revision": _Quoted(str(revision)),
        "date": _Quoted(_str(tracking.get("current_release_date"), "document.tracking.current_release_date")[:10]),
    }
    rows = product_rows(doc)
    urls = source_urls(doc, path)
    skipped, warnings, entries = {}, [], {}
    named = set()
    for n, vuln in enumerate(_arr(doc.get("vulnerabilities"), "vulnerabilities")):
        _obj(vuln, "vulnerabilities[%d]" % n)
        cve = vuln.get("cve")
        if not cve:
            raise CsafError("a vulnerability without a cve id")
        if not isinstance(cve, str) or not CVE_ID.match(cve):
            raise CsafError("vulnerabilities[%d].cve %s is not a CVE id" % (n, catalog_validate.short(cve)))
        per_comp = {}
        product_status = _obj(vuln.get("product_status"), "%s product_status" % cve, optional=True)
        for status in ("known_affected", "last_affected", "fixed", "first_fixed"):
            for pid in _arr(product_status.get(status), "%s product_status.%s" % (cve, status)):
                named.add(pid if isinstance(pid, str) else None)
                row = rows.get(pid) if isinstance(pid, str) else None
                if row is None:
                    raise CsafError("%s: product_status.%s names %s, which the product_tree lacks"
                                    % (cve, status, catalog_validate.short(pid)))
                component, branch = _classify(row, unknown_products)
                if component is None:
                    skipped.setdefault(pid, {"product_id": pid, "product": row.get("product"),
                                             "arch": row.get("arch"), "version_text": row.get("version_text"),
                                             "reason": branch})
                    continue
                per_comp.setdefault(component, {}).setdefault(branch, []).append((status, pid, row))
        for component, branches in sorted(per_comp.items()):
            entry = _entry(doc, vuln, component, branches, advisory, urls, verified, warnings)
            if entry is not None:
                entries.setdefault(component, []).append(entry)
    for pid in sorted(set(rows) - named):
        row = rows[pid]
        _classify(row, unknown_products)  # an unknown product is an error even where no vulnerability names it
        skipped[pid] = {"product_id": pid, "product": row.get("product"), "arch": row.get("arch"),
                        "version_text": row.get("version_text"),
                        "reason": "no vulnerability's product_status names this row"}
    for comp_entries in entries.values():
        comp_entries.sort(key=lambda e: e["id"])
    return {"advisory": advisory, "entries": entries, "skipped": [skipped[k] for k in sorted(skipped)],
            "warnings": warnings}


def _branch_key(branch):
    """Data-center branches first, then guest-driver branches, each by number."""
    guest = bool(branch) and branch.startswith(GUEST_KEY)
    number = branch[len(GUEST_KEY):] if guest else branch
    return guest, int(number) if number and number.isdigit() else -1


def default_remediation(component, affected, advisory_ids):
    """The remediation text of an entry whose document carries none: the first fixed release of
    each branch (guest-driver branches marked), naming the bulletins."""
    fixes = []
    for i in affected:
        if not i.get("fixed"):
            continue
        text = "R%s %s" % (i["branch"], i["fixed"]) if "branch" in i else str(i["fixed"])
        if (i.get("conditions") or {}).get("vgpu_guest"):
            text = "vGPU guest driver " + text
        if text not in fixes:
            fixes.append(text)
    return ("Upgrade to the first fixed release of the installed %s or later: %s (NVIDIA security bulletin%s %s)."
            % ("branch" if component == "driver" else "line", ", ".join(fixes) or "none published",
               "s" if len(advisory_ids) > 1 else "", " and ".join(str(a) for a in advisory_ids)))


def _entry(doc, vuln, component, branches, advisory, urls, verified, warnings):
    cve = vuln["cve"]
    eid = "%s-%s" % (ID_PREFIX[component], cve.lower())
    affected, qualifiers, pids = [], [], set()
    for key in sorted(branches, key=_branch_key):
        guest = bool(key) and key.startswith(GUEST_KEY)
        branch = key[len(GUEST_KEY):] if guest else key
        item = {} if branch is None else {"branch": _Quoted(branch)}
        fixed = None
        bounds = {}
        guest_notes = []
        for status, pid, row in branches[key]:
            pids.add(pid)
            parsed = parse_row_version(row["version_text"], status)
            if guest and parsed.get("qualifier"):
                # the qualifier names NVIDIA vGPU software's release: a note, not a condition
                guest_notes.append("%s: %s" % ("fixed" if status in ("fixed", "first_fixed") else "affected",
                                               parsed["qualifier"]))
                if "exact" in parsed and status not in ("fixed", "first_fixed") \
                        and _GUEST_UPTO.match(parsed["qualifier"]):
                    parsed = {"last_affected": parsed["exact"]}
            elif parsed.get("qualifier"):
                qualifiers.append("%s: %s" % (row["version_text"], parsed["qualifier"]))
            if status in ("fixed", "first_fixed"):
                for v in parsed.get("listed") or [parsed.get("exact") or parsed.get("before")
                                                  or parsed.get("last_affected")]:
                    fixed = v if fixed is None else min(fixed, v, key=lambda x: _order(component, x))
            elif "before" in parsed:
                bounds["before"] = parsed["before"]
            elif "last_affected" in parsed:
                bounds["last_affected"] = parsed["last_affected"]
                if parsed.get("introduced"):
                    bounds["introduced"] = parsed["introduced"]
            else:
                bounds.setdefault("introduced", parsed["exact"])
                bounds["last_affected"] = parsed["exact"]
        if not bounds:
            continue  # a fixed row without an affected row says nothing about this branch
        if fixed and branch and not catalog_validate.in_branch(_order(component, fixed), branch):
            # bulletin 5703 names 575.274.02 as the fix of its R535 vGPU 16 guest row
            warnings.append("%s: the fixed row of branch %s names %s, outside the branch; the item keeps only "
                            "the affected bound" % (eid, branch, fixed))
            guest_notes.append("NVIDIA's fixed row names %s, outside this branch" % fixed)
            fixed = None
        if fixed and bounds.get("last_affected") and _order(component, bounds["last_affected"]) >= _order(component, fixed):
            # "0.0 to 4.8.2" affected and "4.8.2" fixed (bulletin 5857): the fixed row decides
            warnings.append("%s: affected row says up to and including %s but the fixed row says %s; using "
                            "prior to %s" % (eid, bounds["last_affected"], fixed, fixed))
            del bounds["last_affected"]
            bounds["before"] = fixed
        if bounds.get("introduced"):
            item["introduced"] = _Quoted(_version(component, bounds["introduced"]))
        if bounds.get("last_affected"):
            item["last_affected"] = _Quoted(_version(component, bounds["last_affected"]))
        fix = fixed or bounds.get("before")
        if fix:
            item["fixed"] = _Quoted(_version(component, fix))
        if fixed and bounds.get("before") and _version(component, fixed) != _version(component, bounds["before"]):
            warnings.append("%s: affected row says prior to %s but the fixed row says %s; using %s"
                            % (eid, bounds["before"], fixed, fixed))
        if guest:
            item["conditions"] = dict(GUEST_CONDITIONS)
            item["note"] = "vGPU guest driver (NVIDIA vGPU software)" + (
                "; " + "; ".join(guest_notes) if guest_notes else "")
        elif guest_notes:
            item["note"] = "; ".join(guest_notes)
        affected.append(item)
    if not affected:
        return None
    problems = []
    score = _score(vuln, pids, problems)
    warnings.extend(problems)
    cve_obj = {"id": cve, "cvss": score}
    cwe = _obj(vuln.get("cwe"), "%s cwe" % cve, optional=True)
    if cwe.get("id"):
        cve_obj["cwe"] = _str(cwe["id"], "%s cwe.id" % cve)
    summary = ""
    for n, note in enumerate(_arr(vuln.get("notes"), "%s notes" % cve)):
        if _obj(note, "%s notes[%d]" % (cve, n)).get("category") in ("summary", "description"):
            summary = _text(_str(note.get("text"), "%s notes[%d].text" % (cve, n)))
            break
    fix_texts, mitig_texts = _remediation_texts(vuln, pids)
    if fix_texts:
        remediation = " ".join(fix_texts)
    else:
        remediation = default_remediation(component, affected, [advisory["id"]])
    entry = {
        "id": eid,
        "kind": "security",
        "title": "%s: %s" % (cve, advisory["title"]),
        "description": summary,
        "cves": [cve_obj],
        "severity": catalog_validate.cvss_rating(score["base_score"]),
        "affected": affected,
        "remediation": remediation,
    }
    if mitig_texts:
        entry["mitigation"] = " ".join(mitig_texts)
    if qualifiers:
        entry["notes"] = "Bulletin qualifiers (review into conditions): " + "; ".join(sorted(set(qualifiers)))
        warnings.append("%s: qualifier needs a structured condition: %s" % (eid, "; ".join(sorted(set(qualifiers)))))
    entry["advisory"] = advisory
    entry["sources"] = [{"url": u, "verified": _Quoted(verified),
                         "what": "CSAF 2.0 advisory %s revision %s, product_status and scores"
                         % (advisory["id"], advisory["revision"])} for u in urls]
    catalog_validate.validate_entry(entry, catalog_validate.COMPONENT_SCHEMES[component])
    return entry


KEY_ORDER = ("id", "kind", "title", "description", "cves", "severity", "affected", "conditions", "remediation",
             "mitigation", "notes", "advisory", "sources")


CSAF_SOURCE = re.compile(r"^https://(nvidia\.custhelp\.com/app/answers/detail/a_id/|"
                         r"github\.com/NVIDIA/product-security/)")


def _ranges(component, entry):
    """``{(branch, guest): (introduced, last_affected, upper)}``: per branch (and guest-driver
    branch) the union of the entry's items, whatever their conditions (a maintainer splits a
    bulletin row into conditioned items; together they cover the row). ``introduced`` is the
    lowest (None: from the first release), ``last_affected`` the highest named, ``upper`` the
    highest bound as ``(version, inclusive)`` (None: every later version)."""
    out = {}
    for item in entry.get("affected") or []:
        key = (str(item.get("branch") or ""), (item.get("conditions") or {}).get("vgpu_guest") is True)
        intro = item.get("introduced")
        last = item.get("last_affected")
        if item.get("fixed"):
            upper = (_order(component, item["fixed"]), False)
        elif last:
            upper = (_order(component, last), True)
        else:
            upper = None
        if key not in out:
            out[key] = [intro and _order(component, intro), last and _order(component, last), upper]
            continue
        have = out[key]
        have[0] = None if not intro or have[0] is None else min(have[0], _order(component, intro))
        if last:
            have[1] = _order(component, last) if have[1] is None else max(have[1], _order(component, last))
        have[2] = None if upper is None or have[2] is None else max(have[2], upper)
    return out


def _range_words(value):
    intro, last, upper = value
    parts = [">= %s" % intro.text] if intro else []
    if upper:
        parts.append("%s %s" % ("<=" if upper[1] else "<", upper[0].text))
    if last and not (upper and upper[1]):
        parts.append("last affected %s" % last.text)
    return " ".join(parts) or "all versions"


def _covers(wide, narrow):
    """Whether the range ``wide`` includes every version of ``narrow``."""
    if wide[0] is not None and (narrow[0] is None or wide[0] > narrow[0]):
        return False
    if wide[2] is None:
        return True
    if narrow[2] is None:
        return False
    return wide[2] >= narrow[2]


def csaf_view(entry):
    """The fields of an entry that a CSAF document carries, other than its ranges (``_ranges``),
    normalised for comparison."""
    cves = sorted((c["id"], float(c["cvss"]["base_score"]), c["cvss"]["vector"], c.get("cwe"))
                  for c in entry.get("cves") or [])
    adv = entry.get("advisory") or {}
    return {"id": entry["id"], "kind": entry["kind"], "severity": entry["severity"], "cves": cves,
            "advisory": (str(adv.get("id", "")), str(adv.get("revision", "")))}


def compare(generated, catalog_entries, component=None):
    """Differences between generated entries and the catalog's, on the CSAF fields only.

    Ranges are compared per branch (guest-driver branches apart) as the union of the items, so
    a bulletin row that a maintainer split into conditioned items still agrees. An entry that
    cites a source other than NVIDIA's bulletin (release notes, NVIDIA's GPU Operator security
    page) may be wider than the bulletin (its ``notes`` say why), never narrower.
    Returns a list of human-readable lines; empty when the catalog agrees.
    """
    have = {e["id"]: e for e in catalog_entries}
    out = []
    for g in generated:
        c = have.get(g["id"])
        if c is None:
            out.append("%s: not in the catalog (new)" % g["id"])
            continue
        gv, cv = csaf_view(g), csaf_view(c)
        for key in sorted(gv):
            if gv[key] != cv[key]:
                out.append("%s: %s differs: CSAF %r, catalog %r" % (g["id"], key, gv[key], cv[key]))
        comp = component or c.get("component") or g["id"].split("-cve-")[0]
        comp = {"ctk": "container-toolkit"}.get(comp, comp)
        gr, cr = _ranges(comp, g), _ranges(comp, c)
        widened = any(not CSAF_SOURCE.match(str(s.get("url", ""))) for s in c.get("sources") or [])
        for key in sorted(set(gr) | set(cr)):
            where = "branch %s%s" % (key[0] or "(any)", " (vGPU guest)" if key[1] else "")
            if key not in cr:
                out.append("%s: %s missing: CSAF %s" % (g["id"], where, _range_words(gr[key])))
            elif key not in gr:
                if not widened:
                    out.append("%s: %s is not in the bulletin: catalog %s" % (g["id"], where, _range_words(cr[key])))
            elif widened and _covers(cr[key], gr[key]):
                continue
            elif cr[key] != gr[key]:
                out.append("%s: %s differs: CSAF %s, catalog %s"
                           % (g["id"], where, _range_words(gr[key]), _range_words(cr[key])))
    return out


def dump_entries(entries):
    """YAML text of a list of entries, versions double-quoted (catalog rule)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow=False, indentless=False):
            # indent sequences inside mappings (yamllint/ansible-lint "indentation")
            return super(Dumper, self).increase_indent(flow, False)

    def quoted(dumper, data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style='"')

    Dumper.add_representer(_Quoted, quoted)
    Dumper.ignore_aliases = lambda self, data: True
    ordered = [dict(sorted(e.items(), key=lambda kv: KEY_ORDER.index(kv[0]) if kv[0] in KEY_ORDER else 99))
               for e in entries]
    return yaml.dump(ordered, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100,
                     allow_unicode=True)


def dump_documents(docs, header=""):
    """YAML text of catalog v2 documents (a list; versions double-quoted), ``header`` (comment
    lines) first: the refresh job's overlay."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow=False, indentless=False):
            return super(Dumper, self).increase_indent(flow, False)

    def quoted(dumper, data):
        return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style='"')

    Dumper.add_representer(_Quoted, quoted)
    Dumper.ignore_aliases = lambda self, data: True
    ordered = []
    for doc in docs:
        doc = dict(doc)
        doc["entries"] = [dict(sorted(e.items(), key=lambda kv: KEY_ORDER.index(kv[0]) if kv[0] in KEY_ORDER else 99))
                          for e in doc["entries"]]
        ordered.append(doc)
    body = yaml.dump(ordered, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=100, allow_unicode=True)
    return "---\n" + "".join("# %s\n" % line if line else "#\n" for line in header.splitlines()) + body


# --------------------------------------------------------------------------- several documents, merge


def _revision_key(advisory):
    """Order of revisions of one advisory: the numbers of ``revision`` (trailing zeros dropped;
    ``1.0``, ``1.0.0`` and ``1`` are the same revision), the release date only where no number
    is given."""
    numbers = [int(n) for n in re.findall(r"\d+", str(advisory.get("revision", "")))[:8]]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), "" if numbers else str(advisory.get("date", ""))


def combine(results):
    """One entry per id across documents: ``({component: [entries]}, notes)``.

    ``results``: ``[(path, import_advisory(...))]`` in command-line order. Two revisions of one
    bulletin generate the same ids: the newer revision (``_revision_key``) wins and a note says
    which file replaced which. The same revision twice (the same file given twice) counts once.
    One revision with different content is an error naming both files. A CVE that two
    bulletins list (CVE-2022-42265: R515 in 5415, R470 in 5520) is one entry made by
    ``merge_advisories``, with a note naming the bulletins.
    """
    per_id = {}  # id -> {advisory id: (entry, component, path)}
    order = []
    notes = []
    for path, result in results:
        for component, entries in sorted(result["entries"].items()):
            for entry in entries:
                by_adv = per_id.get(entry["id"])
                if by_adv is None:
                    by_adv = per_id[entry["id"]] = {}
                    order.append(entry["id"])
                aid = str(entry["advisory"]["id"])
                prev = by_adv.get(aid)
                if prev is None:
                    by_adv[aid] = (entry, component, path)
                    continue
                old, _comp, old_path = prev
                if old == entry:
                    continue
                old_adv, new_adv = old["advisory"], entry["advisory"]
                if _revision_key(old_adv) == _revision_key(new_adv):
                    raise CsafError("entry %s: revision %s of advisory %s differs from %s, which claims the same "
                                    "revision" % (entry["id"], new_adv["revision"], new_adv["id"], old_path), path)
                if _revision_key(new_adv) > _revision_key(old_adv):
                    by_adv[aid] = (entry, component, path)
                    notes.append("%s: revision %s (%s) replaces revision %s (%s)"
                                 % (entry["id"], new_adv["revision"], path, old_adv["revision"], old_path))
                else:
                    notes.append("%s: revision %s (%s) is kept over revision %s (%s)"
                                 % (entry["id"], old_adv["revision"], old_path, new_adv["revision"], path))
    out = {}
    for eid in order:
        chosen = list(per_id[eid].values())
        component = chosen[0][1]
        if any(c[1] != component for c in chosen):
            raise CsafError("entry %s is generated for components %s" % (eid, ", ".join(sorted(set(c[1] for c in chosen)))),
                            chosen[-1][2])
        if len(chosen) == 1:
            entry = chosen[0][0]
        else:
            entry = merge_advisories(component, [c[0] for c in chosen])
            chosen.sort(key=lambda c: _advisory_key(c[0]))
            notes.append("%s: listed in bulletins %s (%s); one entry with the affected items of each"
                         % (eid, ", ".join(str(c[0]["advisory"]["id"]) for c in chosen),
                            ", ".join(c[2] for c in chosen)))
        out.setdefault(component, []).append(entry)
    for entries in out.values():
        entries.sort(key=lambda e: e["id"])
    return out, notes


def _advisory_key(entry):
    adv = entry["advisory"]
    return str(adv.get("date", "")), _revision_key(adv), str(adv.get("id", ""))


# The note of each item of a merged entry starts with the bulletin that lists it, so a reader of
# one bulletin's branches (audit/rules/catalog.latest_driver_bulletin) can tell them apart.
ITEM_BULLETIN_NOTE = "NVIDIA security bulletin %s"
ITEM_BULLETIN_RE = re.compile(r"^NVIDIA security bulletin ([A-Za-z0-9._-]+)")


def merge_advisories(component, entries):
    """One entry for a CVE that several bulletins list for one component.

    The newest bulletin (by its revision date) gives the title, description, CVSS, advisory and
    remediation text it carries; ``affected`` is the union of every bulletin's items (each
    bulletin lists the branches it fixed: 5415 names R515, 5520 R470 for CVE-2022-42265), an item
    that two bulletins give twice counted once, each item's ``note`` starting with its bulletin
    (ITEM_BULLETIN_NOTE); ``sources`` holds every bulletin's sources
    (each with its own ``verified`` date and revision in ``what``); ``notes`` names the other
    bulletins with their revision and date. A CVE whose CVSS vector differs between the
    bulletins is an error (a person decides which holds). The result is validated again.
    """
    ordered = sorted(entries, key=_advisory_key)
    newest = ordered[-1]
    vectors = set(tuple(sorted((c["id"], c["cvss"]["vector"]) for c in e["cves"])) for e in ordered)
    if len(vectors) > 1:
        raise CsafError("entry %s: bulletins %s give the CVE different CVSS vectors; merge it by hand"
                        % (newest["id"], ", ".join(str(e["advisory"]["id"]) for e in ordered)))
    merged = dict(newest)
    affected, seen = [], []
    for e in ordered:
        for item in e["affected"]:
            plain = _plain(item)
            if plain not in seen:
                seen.append(plain)
                tagged = dict(item)
                tagged["note"] = ITEM_BULLETIN_NOTE % e["advisory"]["id"] + ("; " + item["note"] if item.get("note") else "")
                affected.append(tagged)

    def order(item):
        guest = GUEST_KEY if (item.get("conditions") or {}).get("vgpu_guest") else ""
        return _branch_key(guest + str(item.get("branch") or "")), str(item.get("fixed") or item.get("last_affected") or "")

    affected.sort(key=order)
    merged["affected"] = affected
    sources = []
    for e in reversed(ordered):
        for src in e["sources"]:
            if _plain(src) not in [_plain(x) for x in sources]:
                sources.append(src)
    merged["sources"] = sources
    ids = [str(e["advisory"]["id"]) for e in ordered]
    if newest["remediation"] == default_remediation(component, newest["affected"], [newest["advisory"]["id"]]):
        merged["remediation"] = default_remediation(component, affected, ids)
    others = "; ".join("NVIDIA security bulletin %s revision %s (%s) lists it too: %s"
                       % (e["advisory"]["id"], e["advisory"]["revision"], e["advisory"]["date"],
                          ", ".join(evaluate_range_text(i) for i in e["affected"]))
                       for e in ordered[:-1])
    merged["notes"] = (newest["notes"] + " " if newest.get("notes") else "") + others + "."
    catalog_validate.validate_entry(merged, catalog_validate.COMPONENT_SCHEMES[component])
    return merged


def evaluate_range_text(item):
    """``R470 < 470.239.06`` for a note (``(vGPU guest)`` on a guest-driver item)."""
    parts = ["R%s" % item["branch"]] if item.get("branch") else []
    parts.extend(catalog_evaluate.range_bounds(item))
    if (item.get("conditions") or {}).get("vgpu_guest"):
        parts.append("(vGPU guest)")
    return " ".join(parts) or "all versions"


def _plain(value):
    """``value`` as YAML reads it back (``_Quoted`` -> str, tuples -> lists)."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if isinstance(value, str) else value


def plan_merge(directory, generated):
    """The catalog files ``--merge`` would write, validated in memory: ``(changes, lines)``.

    ``changes`` maps each file to its new text (the old text with the new entries appended, or a
    new component file); ``lines`` says per component what happens. Entries whose id the
    catalog has are never rewritten. Before anything is written the merged catalog, every file
    as it would be, goes through the audit's own reader (``catalog_load.parse_document``) and
    validator (``catalog_validate.validate_catalog``: schema rules in code, ranges, CVSS severities,
    ids unique across files), each appended block must read back as exactly the new entries,
    and with ``jsonschema`` installed the documents go through the JSON schema too. Raises
    catalog_validate.CatalogError (or OSError) when anything fails: then nothing may be written.
    """
    texts = {}
    for name in catalog_load.catalog_files(directory):
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            texts[path] = f.read().decode("utf-8")
    current = dict((path, catalog_load.parse_document(text, path)) for path, text in texts.items())
    try:
        existing = catalog_validate.validate_catalog(list(current.values()))
    except catalog_validate.CatalogError as exc:
        raise catalog_validate.CatalogError("the catalog in %s is invalid before the merge: %s" % (directory, exc))
    have = set(e["id"] for e in existing)
    changes, appended, lines = {}, {}, []
    for component, entries in sorted(generated.items()):
        target = os.path.join(directory, "%s.yml" % component)
        new = [e for e in entries if e["id"] not in have]
        if not new:
            lines.append("%s: nothing new" % target)
            continue
        base = texts.get(target)
        if base is None:
            base = ("---\nschema_version: 2\ncomponent: %s\nversion_scheme: %s\nentries:\n"
                    % (component, catalog_validate.COMPONENT_SCHEMES[component]))
        elif not base.endswith("\n"):
            base += "\n"
        block = dump_entries(new)
        changes[target] = base + "\n" + "".join("  " + line if line.strip() else line
                                                for line in block.splitlines(True))
        appended[target] = new
        lines.append("%s: appended %d entr%s" % (target, len(new), "y" if len(new) == 1 else "ies"))
    merged = dict(current)
    for path, text in changes.items():
        doc = catalog_load.parse_document(text, path)
        before = (current.get(path) or {}).get("entries") or []
        after = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(after, list) or _plain(after) != _plain(before) + _plain(appended[path]):
            raise catalog_validate.CatalogError("%s: the appended entries do not read back as written (is the file's "
                                                "last entry list the document's top-level 'entries'?)" % path)
        merged[path] = doc
    docs = [merged[path] for path in sorted(merged)]
    catalog_validate.validate_catalog(docs)
    catalog_load.check_schema(docs, "merged catalog")
    return changes, lines


def write_files(changes, backup=False):
    """Write every file of ``changes`` ({path: text}) through ``fileutil`` (the collection's one
    write primitive: atomic, the existing file's mode kept, 0644 for a new file; ``backup``: a
    0600 copy of the old file beside it first). The whole set was validated by ``plan_merge``
    before; a failure part way names the file and leaves every file whole."""
    written = []
    for path, text in sorted(changes.items()):
        data = text.encode("utf-8")
        if backup:
            fileutil.write_file(path, data)
        else:
            fileutil.atomic_write(path, data)
        written.append(path)
    return written
