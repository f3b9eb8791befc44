# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit report as one self-contained HTML page: inline CSS, no scripts, no external resources.

Everything in a report may come from a node, so values go into the page only through MarkupSafe
(Jinja2's, so always on a controller): ``Markup(constant) % values`` escapes every value; links
only for URLs that pass ``module_utils/catalog/validate.is_safe_url`` (``_html_link``) and to a
node's details (``_html_anchor``). ``tests/unit/plugins/plugin_utils/audit/report/test_escaping.py``
fails on any other way of putting a value into the page.
"""
from __future__ import annotations

import json

from markupsafe import Markup  # Jinja2's dependency: always there with ansible-core

from ansible_collections.kubegpu.fleet.plugins.module_utils.catalog.validate import is_safe_url
from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import (
    CVE_NODE_LIST_MAX,
    RENDER_MAX_DEPTH,
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
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #d8dde6;padding:4px 8px;text-align:left}
th{background:#f3f5f8}td.cell{text-align:center;font-weight:600;min-width:28px}
td.critical,span.critical{background:#c62828;color:#fff}td.warning,span.warning{background:#ef8f00;color:#111}
td.info,span.info{background:#1565c0;color:#fff}td.none{background:#e9f5ea;color:#2e7d32}
td.unreachable,td.failed{background:#6b7280;color:#fff}
span.sev{border-radius:4px;padding:1px 6px;font-size:12px;font-weight:600}
.finding{border:1px solid #d8dde6;border-radius:8px;padding:8px 12px;margin:8px 0}
pre{background:#f6f8fa;padding:8px;border-radius:6px;overflow:auto;font-size:12px;margin:6px 0}
.matrix th.rot{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
""")
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


def render_html(report):
    report = json_safe(report, visible=True, max_depth=RENDER_MAX_DEPTH)
    s = report["summary"]
    ids = list(s["by_id"].keys())
    parts = [Markup("<!DOCTYPE html>"), Markup('<html lang="en"><head><meta charset="utf-8">'),
             Markup("<title>kubegpu.fleet audit %s</title>") % report["generated_at"],
             Markup("<style>%s</style></head><body>") % _CSS,
             Markup("<h1>kubegpu.fleet GPU fleet audit</h1>"),
             Markup('<div class="meta">Generated %s &middot; report schema %s v%s &middot; collection %s &middot; '
                    "fail on: %s</div>") % (report["generated_at"], report["schema"], report["schema_version"],
                                            report["collection_version"] or "?", s["fail_on"])]
    parts.append(Markup('<section id="summary"><h2>Fleet summary</h2><div class="cards">'))
    for label, value, cls in (("nodes", s["nodes_total"], ""), ("audited", s["nodes_audited"], ""),
                              ("clean", s["nodes_clean"], "clean"),
                              ("unreachable", s["nodes_unreachable"], ""), ("failed", s["nodes_failed"], ""),
                              ("critical", s["by_severity"]["critical"], "critical"),
                              ("warning", s["by_severity"]["warning"], "warning"),
                              ("info", s["by_severity"]["info"], "info")):
        parts.append(Markup('<div class="card %s" data-metric="%s"><div class="n">%s</div><div class="l">%s</div></div>')
                     % (cls, label, value, label))
    parts.append(Markup("</div>"))
    parts += _html_catalog(report.get("catalog"))
    if s["unreachable"]:
        parts.append(Markup('<p id="unreachable"><strong>Unreachable:</strong> %s</p>')
                     % Markup(", ").join(s["unreachable"]))
    if s["failed"]:
        parts.append(Markup('<p id="failed"><strong>Audit failed on:</strong> %s</p>') % Markup(", ").join(s["failed"]))
    parts.append(Markup("</section>"))
    if s.get("hands_on"):
        parts.append(Markup('<section id="hands-on"><h2>Hands-on work</h2><p>Left cordoned for a person:</p><ul>'))
        for entry in s["hands_on"]:
            parts.append(Markup('<li data-node="%s"><strong>%s</strong> (%s): %s</li>')
                         % (entry["node"], _html_anchor(entry["node"]),
                            Markup(", ").join(Markup("<code>%s</code>") % i for i in entry["findings"]),
                            Markup("; ").join(entry["work"])))
        parts.append(Markup("</ul></section>"))

    parts += _html_cves(report.get("cves") or [])
    parts.append(Markup('<section id="matrix"><h2>Node &times; finding</h2>'))
    if ids:
        parts.append(Markup('<table class="matrix"><thead><tr><th>node</th>'))
        for fid in ids:
            parts.append(Markup('<th class="rot" title="%s">%s</th>') % (s["by_id"][fid]["title"], fid))
        parts.append(Markup("</tr></thead><tbody>"))
        for node in report["nodes"]:
            have = dict((f["id"], f["severity"]) for f in node["findings"])
            parts.append(Markup('<tr data-node="%s"><th>%s</th>') % (node["name"], node["name"]))
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
    else:
        parts.append(Markup('<p id="no-findings">No findings on any audited node.</p>'))
    parts.append(Markup("</section>"))

    parts.append(Markup('<section id="details"><h2>Details</h2>'))
    for node in report["nodes"]:
        parts.append(Markup('<h3 id="node-%s">%s <small>(%s)</small></h3>') % (node["name"], node["name"], node["status"]))
        if node.get("error"):
            parts.append(Markup("<pre>%s</pre>") % node["error"])
        if node["status"] == "audited" and not node["findings"]:
            parts.append(Markup("<p>No findings.</p>"))
        for f in node["findings"]:
            parts.append(_html_finding(f))
    if report["cluster"]["findings"]:
        parts.append(Markup('<h3 id="cluster">Cluster</h3>'))
        for f in report["cluster"]["findings"]:
            parts.append(_html_finding(f))
    parts.append(Markup("</section></body></html>"))
    return str(Markup("\n").join(parts) + Markup("\n"))


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


def _html_names(names):
    shown = Markup(", ").join(_html_anchor(n) for n in names[:CVE_NODE_LIST_MAX])
    if len(names) > CVE_NODE_LIST_MAX:
        shown += Markup(" and %d more") % (len(names) - CVE_NODE_LIST_MAX)
    return shown


def _html_cves(cves):
    if not cves:
        return []
    parts = [Markup('<section id="cves"><h2>CVEs across the fleet</h2>'),
             Markup("<p>%d CVE(s) from the known-bad catalog affect audited nodes. <em>Possibly</em>: only an unknown "
                    "condition keeps the node in the advisory's scope.</p>") % len(cves),
             Markup('<table class="cves"><thead><tr><th>CVE</th><th>CVSS</th><th>severity</th><th>components</th>'
                    "<th>nodes</th><th>fixed in</th><th>advisories</th></tr></thead><tbody>")]
    for c in cves:
        sev_class = {"critical": "critical", "high": "critical", "medium": "warning"}.get(c["severity"], "info")
        nodes = Markup("%d: %s") % (c["affected_nodes"], _html_names(c["node_names"])) if c["node_names"] \
            else Markup("cluster")
        if c["possibly_affected_nodes"]:
            nodes += Markup(" <small>(possibly: %s)</small>") % _html_names(c["possibly_affected_nodes"])
        links = Markup("").join(Markup("<li>%s</li>") % _html_link(u) for u in c["sources"])
        fixed = Markup("; ").join(Markup("%s %s") % (comp, Markup(", ").join(versions))
                                  for comp, versions in c["fixed"].items())
        parts.append(
            Markup('<tr data-cve="%s" data-affected-nodes="%d"><td><code>%s</code>%s</td><td>%s</td>'
                   '<td><span class="sev %s">%s</span></td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>')
            % (c["id"], c["affected_nodes"], c["id"], Markup("<ul>%s</ul>") % links if links else "",
               Markup("%.1f") % c["max_cvss"] if c["max_cvss"] is not None else "?", _SEV_CLASS[sev_class], c["severity"],
               Markup(", ").join(c["components"]), nodes, fixed or "-", Markup(", ").join(c["advisories"]) or "-"))
    parts.append(Markup("</tbody></table></section>"))
    return parts


def _html_finding(f):
    rem = f["remediation"] or {}
    out = [Markup('<div class="finding" data-finding="%s" data-severity="%s">') % (f["id"], f["severity"]),
           Markup('<div><span class="sev %s">%s</span> <code>%s</code> %s</div>')
           % (_SEV_CLASS.get(f["severity"], ""), f["severity"], f["id"], f["title"])]
    if f["evidence"]:
        out.append(Markup("<div><strong>Evidence</strong><pre>%s</pre></div>")
                   % json.dumps(f["evidence"], indent=2, sort_keys=True, allow_nan=False))
    if rem:
        out.append(Markup("<div><strong>Remediation</strong>: %s") % rem.get("summary", ""))
        if rem.get("role"):
            out.append(Markup(" &mdash; role <code>%s</code>") % rem["role"])
        if rem.get("vars"):
            out.append(Markup("<pre>%s</pre>") % json.dumps(rem["vars"], indent=2, sort_keys=True, allow_nan=False))
        out.append(Markup("</div>"))
    if f["references"]:
        out.append(Markup("<div><strong>References</strong><ul>%s</ul></div>")
                   % Markup("").join(Markup("<li>%s</li>") % _html_link(r) for r in f["references"]))
    out.append(Markup("</div>"))
    return Markup("").join(out)
