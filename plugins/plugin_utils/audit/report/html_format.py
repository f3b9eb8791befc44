# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit report as one self-contained HTML page: inline CSS, one inline filter script, no
external resources, a bounded size.

Everything in a report may come from a node, so values go into the page only through MarkupSafe
(Jinja2's, so always on a controller): ``Markup(constant) % values`` escapes every value; links
only for URLs that pass ``module_utils/catalog/validate.is_safe_url`` (``_html_link``) and to a
node's details (``_html_anchor``). The page's one script (``_html_script``, a constant that
takes no value) filters the node and finding rows as the reader types; a Content-Security-Policy
meta tag allows only that script and the page's style sheet, by their SHA-256 (no network, no
other script, no form target). ``tests/unit/plugins/plugin_utils/audit/report/test_escaping.py``
fails on any other way of putting a value or active markup into the page.

Summary first (cards, node lists, findings, coverage, GPU models, node groups), then the cluster's
findings once each with the nodes they affect, the CVEs, the node x finding matrix of the nodes'
own findings and each node's details: what grows with the fleet is bounded (report/view.py) and
node lists are collapsed (``<details>``); the JSON report keeps everything.
"""
from __future__ import annotations

import base64
import hashlib

from markupsafe import Markup  # Jinja2's dependency: always there with ansible-core

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import is_safe_url
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report import view
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import (
    CVE_NODE_LIST_MAX,
    RENDER_MAX_DEPTH,
    coverage_limit_text,
    json_safe,
)

# The page's style sheet, inline: the page loads nothing.
_CSS = Markup("""
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d2430;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}h3{font-size:15px;margin:18px 0 6px}
.meta{color:#5b6575;font-size:13px;margin-bottom:16px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #d8dde6;border-radius:8px;padding:10px 14px;min-width:110px}
.card .n{font-size:26px;font-weight:600}.card .l{font-size:12px;color:#5b6575;text-transform:uppercase}
.card.critical{border-color:#c62828;background:#fdecea}.card.warning{border-color:#ef8f00;background:#fff5e0}
.card.info{border-color:#1565c0;background:#e8f1fc}.card.clean{border-color:#2e7d32;background:#e9f5ea}
.card.unseen{border-color:#6b7280;background:#f1f2f4}
table{border-collapse:collapse;font-size:13px;margin:6px 0}th,td{border:1px solid #d8dde6;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f3f5f8}td.cell{text-align:center;font-weight:600;min-width:28px}
td.critical,span.critical{background:#c62828;color:#fff}td.warning,span.warning{background:#ef8f00;color:#111}
td.info,span.info{background:#1565c0;color:#fff}td.none{background:#e9f5ea;color:#2e7d32}
td.unreachable,td.failed{background:#6b7280;color:#fff}
span.sev{border-radius:4px;padding:1px 6px;font-size:12px;font-weight:600}
.finding{border:1px solid #d8dde6;border-radius:8px;padding:8px 12px;margin:8px 0}
.node{border-top:1px solid #d8dde6;margin-top:10px}
.more{color:#5b6575;font-style:italic}
summary{cursor:pointer}
input.filter{font-size:14px;padding:4px 8px;width:320px;margin:4px 0 8px}
pre{background:#f6f8fa;padding:8px;border-radius:6px;overflow:auto;font-size:12px;margin:6px 0}
.matrix th.rot{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
""")
# The page's one script: the filter box (shown only where scripts run) hides the rows and node
# sections whose text does not hold what is typed, and opens the collapsed lists while it filters.
_SCRIPT = Markup("""
(function(){var box=document.getElementById("filter");if(!box){return;}box.hidden=false;
box.addEventListener("input",function(){var q=box.value.trim().toLowerCase();
document.querySelectorAll(".fi").forEach(function(e){e.hidden=q!==""&&e.textContent.toLowerCase().indexOf(q)<0;});
document.querySelectorAll("details.fd").forEach(function(d){d.open=q!==""||d.hasAttribute("data-open");});});})();
""")


def _sha256(text):
    return base64.b64encode(hashlib.sha256(str(text).encode("utf-8")).digest()).decode("ascii")


# Only the page's own style sheet and script run: everything else (another script, an image, a
# font, a frame, a form target, a base URL) is refused by the browser.
_CSP = ("default-src 'none'; style-src 'sha256-%s'; script-src 'sha256-%s'; base-uri 'none'; form-action 'none'"
        % (_sha256(_CSS), _sha256(_SCRIPT)))
_CSP_META = Markup('<meta http-equiv="Content-Security-Policy" content="%s">') % _CSP
# Class names come from these fixed sets only; anything else renders as the neutral class.
_SEV_CLASS = {"critical": Markup("critical"), "warning": Markup("warning"), "info": Markup("info")}
_STATUS_CLASS = {"unreachable": Markup("unreachable"), "failed": Markup("failed")}


def _html_link(url):
    """A link for a URL that passes ``is_safe_url`` (https, a host, no credentials); else the URL as text."""
    if is_safe_url(url):
        return Markup('<a href="%s" rel="noopener noreferrer">%s</a>') % (url, url)
    return Markup("%s") % url


def _html_anchor(name):
    """A link to a node's details (``#node-NAME``) with the name as its text."""
    return Markup('<a href="#node-%s">%s</a>') % (name, name)


def _html_script():
    """The page's one script element (a constant; its hash is in the page's Content-Security-Policy)."""
    return Markup("<script>%s</script>") % _SCRIPT


def _node_ref(name, detailed):
    """A node's name, linked to its details when the page has them."""
    return _html_anchor(name) if name in detailed else Markup("%s") % name


def _html_names(names, detailed=(), limit=CVE_NODE_LIST_MAX):
    shown = Markup(", ").join(_node_ref(n, detailed) for n in names[:limit])
    if len(names) > limit:
        shown += Markup(' <span class="more">and %d more</span>') % (len(names) - limit)
    return shown


def _html_node_list(names, detailed, label, open_=False):
    """A collapsed list of node names (``label (N)`` as its summary), bounded."""
    return Markup('<details class="fd"%s><summary>%s (%d)</summary><p>%s</p></details>') % (
        Markup(" open data-open") if open_ else Markup(""), label, len(names),
        _html_names(names, detailed, view.NAMES_MAX))


def render_html(report):
    report = json_safe(report, visible=True, max_depth=RENDER_MAX_DEPTH)
    s = report["summary"]
    nodes_shown, nodes_more = view.bounded(view.worst_first(report), view.NODES_MAX)
    detailed = set(n["name"] for n, _w in nodes_shown)
    parts = [Markup("<!DOCTYPE html>"), Markup('<html lang="en"><head><meta charset="utf-8">'),
             _CSP_META,
             Markup("<title>kubegpu.fleet audit %s</title>") % report["generated_at"],
             Markup("<style>%s</style></head><body>") % _CSS,
             Markup("<h1>kubegpu.fleet GPU fleet audit</h1>"),
             Markup('<div class="meta">Generated %s &middot; report schema %s v%s &middot; collection %s &middot; '
                    "fail on: %s</div>") % (report["generated_at"], report["schema"], report["schema_version"],
                                            report["collection_version"] or "?", s["fail_on"]),
             Markup('<input class="filter" id="filter" type="search" hidden placeholder="filter nodes and findings" '
                    'aria-label="filter nodes and findings">')]
    parts.append(Markup('<section id="summary"><h2>Fleet summary</h2><div class="cards">'))
    for label, value, cls in (("nodes", s["nodes_total"], ""), ("audited", s["nodes_audited"], ""),
                              ("clean", s["nodes_clean"], "clean"),
                              ("not a GPU node", s.get("nodes_not_gpu", 0), "unseen"),
                              ("not inspected", s.get("nodes_not_inspected", 0), "unseen"),
                              ("unreachable", s["nodes_unreachable"], ""), ("failed", s["nodes_failed"], ""),
                              ("critical", s["by_severity"]["critical"], "critical"),
                              ("warning", s["by_severity"]["warning"], "warning"),
                              ("info", s["by_severity"]["info"], "info")):
        parts.append(Markup('<div class="card %s" data-metric="%s"><div class="n">%s</div><div class="l">%s</div></div>')
                     % (cls, label, value, label))
    parts.append(Markup("</div>"))
    parts += _html_catalog(report.get("catalog"))
    limit = s.get("coverage_limit")
    if isinstance(limit, dict):
        parts.append(Markup('<p id="coverage-limit">%sCoverage limit: %s.</p>')
                     % (Markup('<span class="sev critical">exceeded</span> ') if limit["exceeded"] else Markup(""),
                        coverage_limit_text(limit)))
    for key, hid, label in (("unreachable", "unreachable", "Unreachable"), ("failed", "failed", "Audit failed on"),
                            ("not_audited", "not-audited", "Not audited in this run"),
                            ("not_gpu_node", "not-gpu-node", "Not a GPU node"),
                            ("not_inspected", "not-inspected", "Not inspected")):
        if s.get(key):
            parts.append(Markup('<div id="%s">%s</div>') % (hid, _html_node_list(s[key], detailed, label, open_=True)))
    parts += _html_by_id(s, detailed)
    parts += _html_tables(s)
    parts.append(Markup("</section>"))
    if s.get("hands_on"):
        parts.append(Markup('<section id="hands-on"><h2>Hands-on work</h2><p>Left cordoned for a person:</p><ul>'))
        shown, more = view.bounded(s["hands_on"], view.NODES_MAX)
        for entry in shown:
            parts.append(Markup('<li class="fi" data-node="%s"><strong>%s</strong> (%s): %s</li>')
                         % (entry["node"], _node_ref(entry["node"], detailed),
                            Markup(", ").join(Markup("<code>%s</code>") % i for i in entry["findings"]),
                            Markup("; ").join(view.short(w) for w in entry["work"])))
        if more:
            parts.append(Markup('<li class="more">%d more nodes: see the JSON report</li>') % more)
        parts.append(Markup("</ul></section>"))
    parts += _html_changes(report.get("changes"), detailed)
    parts += _html_cluster(report, detailed)
    parts += _html_cves(report.get("cves") or [], detailed)
    parts += _html_matrix(report, nodes_shown, nodes_more)
    parts.append(Markup('<section id="details"><h2>Details</h2>'))
    index = view.cluster_index(report)
    for node, _worst in nodes_shown:
        parts.append(_html_node(node, index))
    if nodes_more:
        parts.append(Markup('<p class="more" id="nodes-more">%d more nodes with findings or not audited: see the '
                            "JSON report.</p>") % nodes_more)
    clean = view.clean_names(report)
    if clean:
        parts.append(Markup('<div id="clean">%s</div>') % _html_node_list(clean, detailed, "Clean nodes"))
    parts.append(Markup("</section>"))
    parts.append(_html_script())
    parts.append(Markup("</body></html>"))
    return str(Markup("\n").join(parts) + Markup("\n"))


def _html_changes(changes, detailed):
    """What changed since each node's previous result (a report built from published results)."""
    if not isinstance(changes, dict):
        return []
    c = changes["counts"]
    parts = [Markup('<section id="changes"><h2>Since the previous run</h2><p>Run %s: %d new, %d resolved, %d '
                    'persisting findings; %d nodes without a previous result.</p>')
             % (changes["run"], c["new"], c["resolved"], c["persisting"], len(changes["no_previous"]))]
    for key, title in (("new", "New"), ("resolved", "Resolved"), ("persisting", "Persisting, longest known first")):
        entries = changes[key]
        if key == "persisting":
            entries = sorted(entries, key=lambda e: (e["first_seen"] or "", e["node"], e["id"]))
        if not entries:
            continue
        shown, more = view.bounded(entries, view.ROWS_MAX)
        parts.append(Markup('<details class="fd" id="changes-%s"%s><summary>%s (%d)</summary><ul>')
                     % (key, Markup(" open") if key != "persisting" else Markup(""), title, len(entries)))
        for e in shown:
            parts.append(Markup('<li class="fi" data-node="%s">%s <code>%s</code>, first seen %s</li>')
                         % (e["node"], _node_ref(e["node"], detailed), e["id"], e.get("first_seen") or "unknown"))
        if more:
            parts.append(Markup('<li class="more">%d more: see the JSON report</li>') % more)
        parts.append(Markup("</ul></details>"))
    if changes["rejected"]:
        shown, more = view.bounded(changes["rejected"], view.ROWS_MAX)
        parts.append(Markup('<details class="fd" id="changes-rejected" open><summary>Stored results not trusted (%d)'
                            '</summary><ul>') % len(changes["rejected"]))
        for e in shown:
            parts.append(Markup("<li>%s: %s</li>") % (e["entry"], view.short(e["reason"])))
        if more:
            parts.append(Markup('<li class="more">%d more: see the JSON report</li>') % more)
        parts.append(Markup("</ul></details>"))
    parts.append(Markup("</section>"))
    return parts


def _html_by_id(s, detailed):
    """The findings table of the summary: one row per finding id, its nodes collapsed."""
    if not s["by_id"]:
        return [Markup('<p id="no-findings">No findings on any audited node.</p>')]
    parts = [Markup('<h3 id="by-finding">Findings</h3><table class="by-id"><thead><tr><th>severity</th><th>finding</th>'
                    "<th>scope</th><th>listed</th><th>nodes</th></tr></thead><tbody>")]
    shown, more = view.bounded(s["by_id"].items(), view.ROWS_MAX)
    for fid, slot in shown:
        nodes = _html_node_list(slot["nodes"], detailed, "nodes") if slot["nodes"] else Markup("cluster")
        parts.append(Markup('<tr class="fi" data-finding="%s"><td><span class="sev %s">%s</span></td>'
                            "<td><code>%s</code> %s</td><td>%s</td><td>%d</td><td>%s</td></tr>")
                     % (fid, _SEV_CLASS.get(slot["severity"], ""), slot["severity"], fid, view.short(slot["title"]),
                        slot.get("scope", "node"), slot["count"], nodes))
    parts.append(Markup("</tbody></table>"))
    if more:
        parts.append(Markup('<p class="more">%d more findings: see the JSON report.</p>') % more)
    return parts


def _html_tables(s):
    """The coverage, GPU model and node group tables of the summary."""
    parts = []
    counts = s.get("coverage") or {}
    if sum((counts.get("status") or {}).values()):
        parts.append(Markup('<h3 id="coverage">Coverage</h3><p>What the audit could see on the audited nodes (nodes '
                            "per answer).</p><table class=\"coverage\"><thead><tr><th>check</th><th>yes</th><th>no</th>"
                            "<th>unknown</th><th>off</th></tr></thead><tbody>"))
        for key, label in view.COVERAGE_CHECKS:
            c = counts.get(key) or {}
            parts.append(Markup("<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>")
                         % (label, c.get("yes", 0), c.get("no", 0), c.get("unknown", 0), c.get("off", 0)))
        parts.append(Markup("</tbody></table>"))
    group = s.get("by_group") or {}
    models = s.get("by_gpu_model") or []
    for hid, title, rows, key in (("gpu-models", Markup("GPU models"),
                                   models if any(m["model"] is not None for m in models) else [], "model"),
                                  ("groups", Markup("Nodes by %s") % group.get("label"), group.get("groups") or [],
                                   "value")):
        if not rows:
            continue
        parts.append(Markup('<h3 id="%s">%s</h3><table class="%s"><thead><tr><th>%s</th><th>nodes</th><th>audited</th>'
                            "<th>clean</th><th>with findings</th></tr></thead><tbody>") % (hid, title, hid, key))
        shown, more = view.bounded(rows, view.ROWS_MAX)
        for row in shown:
            parts.append(Markup('<tr class="fi"><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>')
                         % (view.short(row[key]) if row[key] is not None else Markup("<em>none</em>"), row["nodes"],
                            row.get("audited", row["nodes"]), row["clean"], row["with_findings"]))
        parts.append(Markup("</tbody></table>"))
        if more:
            parts.append(Markup('<p class="more">%d more rows: see the JSON report.</p>') % more)
    return parts


def _html_cluster(report, detailed):
    """The cluster's findings, each once, with the nodes it affects (collapsed) and its details."""
    findings = report["cluster"]["findings"]
    if not findings:
        return []
    parts = [Markup('<section id="cluster"><h2>Cluster</h2><p>Findings of the cluster (its GPU Operator, device plugin, '
                    "MIG manager, DCGM Exporter): each listed once with the nodes it affects.</p>")]
    shown, more = view.bounded(findings, view.ROWS_MAX)
    for f in shown:
        nodes = _html_node_list(f["nodes"], detailed, "affected nodes") if f.get("nodes") else Markup("the cluster")
        parts.append(Markup('<div class="fi" data-affected-nodes="%d">%s%s</div>')
                     % (f.get("affected_nodes") or 0, nodes, _html_finding(f)))
    if more:
        parts.append(Markup('<p class="more">%d more: see the JSON report.</p>') % more)
    parts.append(Markup("</section>"))
    return parts


def _html_matrix(report, nodes_shown, nodes_more):
    """Node x finding of the nodes' own findings (the cluster's are listed once above)."""
    ids = view.node_scope_ids(report)[:view.ROWS_MAX]
    parts = [Markup('<section id="matrix"><h2>Node &times; finding</h2>')]
    rows = [(n, w) for n, w in nodes_shown if n["findings"] or n["status"] != "audited"]
    if not ids or not rows:
        parts.append(Markup('<p id="no-node-findings">No node has findings of its own.</p></section>'))
        return parts
    parts.append(Markup('<table class="matrix"><thead><tr><th>node</th>'))
    for fid in ids:
        parts.append(Markup('<th class="rot" title="%s">%s</th>') % (report["summary"]["by_id"][fid]["title"], fid))
    parts.append(Markup("</tr></thead><tbody>"))
    for node, _worst in rows:
        have = dict((f["id"], f["severity"]) for f in node["findings"])
        parts.append(Markup('<tr class="fi" data-node="%s"><th>%s</th>') % (node["name"], _html_anchor(node["name"])))
        for fid in ids:
            if node["status"] != "audited":
                parts.append(Markup('<td class="cell %s" title="%s">?</td>')
                             % (_STATUS_CLASS.get(node["status"], ""), node["status"]))
            elif fid in have:
                parts.append(Markup('<td class="cell %s" data-finding="%s" title="%s">%s</td>')
                             % (_SEV_CLASS.get(have[fid], ""), fid, have[fid], have[fid][:1].upper()))
            else:
                parts.append(Markup('<td class="cell none"></td>'))
        parts.append(Markup("</tr>"))
    parts.append(Markup("</tbody></table>"))
    if nodes_more:
        parts.append(Markup('<p class="more">%d more nodes: see the JSON report.</p>') % nodes_more)
    parts.append(Markup("</section>"))
    return parts


def _html_node(node, index):
    """One node's section: status, coverage, the cluster's findings affecting it, its own findings."""
    cov = node.get("coverage") or {}
    status = node["status"]
    if cov.get("status") not in (None, "gpu_node"):
        status = Markup("%s, %s") % (status, view.COVERAGE_STATUS[cov["status"]])
    out = [Markup('<div class="node fi" data-node="%s"><h3 id="node-%s">%s <small>(%s)</small></h3>')
           % (node["name"], node["name"], node["name"], status)]
    if node.get("error"):
        out.append(Markup("<pre>%s</pre>") % view.short(node["error"]))
    if cov.get("reason"):
        out.append(Markup("<p>%s</p>") % view.short(cov["reason"]))
    line = view.coverage_line(cov)
    if line:
        out.append(Markup("<p><strong>Coverage</strong>: %s</p>") % Markup("; ").join(
            Markup("%s: <strong>%s</strong> (%s)") % item for item in line))
    refs = node.get("cluster_findings") or []
    if refs:
        out.append(Markup("<p>Affected by the cluster's %s</p>") % Markup(", ").join(
            Markup("<code>%s</code> (%s)") % (r["id"], (index.get((r["id"], r["digest"])) or {}).get("severity", "?"))
            for r in refs))
    if node["status"] == "audited" and not node["findings"]:
        out.append(Markup("<p>No findings of its own.</p>"))
    shown, more = view.bounded(node["findings"], view.FINDINGS_MAX)
    for f in shown:
        out.append(_html_finding(f))
    if more:
        out.append(Markup('<p class="more">%d more findings: see the JSON report.</p>') % more)
    out.append(Markup("</div>"))
    return Markup("").join(out)


def _html_catalog(cat):
    """The catalog's date and, when it is stale, the warning (nothing without a catalog section)."""
    if not isinstance(cat, dict):
        return []
    parts = []
    newest = cat.get("newest_advisory")
    if isinstance(newest, dict):
        parts.append(Markup('<p id="catalog">Known-bad catalog: %s entries from %s bulletins; newest bulletin %s (%s), '
                            "revision %s of %s, %s days old (warning after %s).</p>")
                     % (cat["entries"], cat["advisories"], newest["id"], newest.get("title") or "",
                        newest.get("revision") or "?", newest["date"], cat["age_days"], cat["max_age_days"]))
    if cat.get("warning"):
        parts.append(Markup('<p id="catalog-warning"><span class="sev warning">warning</span> %s.</p>') % cat["warning"])
    return parts


def _html_cves(cves, detailed):
    if not cves:
        return []
    parts = [Markup('<section id="cves"><h2>CVEs across the fleet</h2>'),
             Markup("<p>%d CVE(s) from the known-bad catalog affect audited nodes. <em>Possibly</em>: only an unknown "
                    "condition keeps the node in the advisory's scope.</p>") % len(cves),
             Markup('<table class="cves"><thead><tr><th>CVE</th><th>CVSS</th><th>severity</th><th>components</th>'
                    "<th>nodes</th><th>fixed in</th><th>advisories</th></tr></thead><tbody>")]
    shown, more = view.bounded(cves, view.ROWS_MAX * 4)
    for c in shown:
        sev_class = {"critical": "critical", "high": "critical", "medium": "warning"}.get(c["severity"], "info")
        nodes = Markup("%d: %s") % (c["affected_nodes"], _html_names(c["node_names"], detailed)) if c["node_names"] \
            else Markup("cluster")
        if c["possibly_affected_nodes"]:
            nodes += Markup(" <small>(possibly: %s)</small>") % _html_names(c["possibly_affected_nodes"], detailed)
        links = Markup("").join(Markup("<li>%s</li>") % _html_link(u) for u in c["sources"][:view.REFERENCES_MAX])
        fixed = Markup("; ").join(Markup("%s %s") % (comp, Markup(", ").join(versions))
                                  for comp, versions in c["fixed"].items())
        parts.append(
            Markup('<tr class="fi" data-cve="%s" data-affected-nodes="%d"><td><code>%s</code>%s</td><td>%s</td>'
                   '<td><span class="sev %s">%s</span></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>')
            % (c["id"], c["affected_nodes"], c["id"], Markup("<ul>%s</ul>") % links if links else "",
               Markup("%.1f") % c["max_cvss"] if c["max_cvss"] is not None else "?", _SEV_CLASS[sev_class], c["severity"],
               Markup(", ").join(c["components"]), nodes, fixed or "-", Markup(", ").join(c["advisories"]) or "-"))
    parts.append(Markup("</tbody></table>"))
    if more:
        parts.append(Markup('<p class="more">%d more CVEs: see the JSON report.</p>') % more)
    parts.append(Markup("</section>"))
    return parts


def _html_finding(f):
    rem = f["remediation"] or {}
    out = [Markup('<div class="finding" data-finding="%s" data-severity="%s">') % (f["id"], f["severity"]),
           Markup('<div><span class="sev %s">%s</span> <code>%s</code> %s</div>')
           % (_SEV_CLASS.get(f["severity"], ""), f["severity"], f["id"], view.short(f["title"]))]
    if f["evidence"]:
        out.append(Markup("<div><strong>Evidence</strong><pre>%s</pre></div>") % view.json_text(f["evidence"]))
    if rem:
        out.append(Markup("<div><strong>Remediation</strong>: %s") % view.short(rem.get("summary", "")))
        if rem.get("role"):
            out.append(Markup(" &mdash; role <code>%s</code>") % view.short(rem["role"]))
        if rem.get("vars"):
            out.append(Markup("<pre>%s</pre>") % view.json_text(rem["vars"]))
        out.append(Markup("</div>"))
    if f["references"]:
        refs, more = view.bounded(f["references"], view.REFERENCES_MAX)
        items = Markup("").join(Markup("<li>%s</li>") % _html_link(r) for r in refs)
        if more:
            items += Markup('<li class="more">%d more: see the JSON report</li>') % more
        out.append(Markup("<div><strong>References</strong><ul>%s</ul></div>") % items)
    out.append(Markup("</div>"))
    return Markup("").join(out)
