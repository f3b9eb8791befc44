#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# This module is implemented as an action plugin and runs on the controller.
from __future__ import annotations

DOCUMENTATION = r"""
module: audit_report
short_description: Write the GPU fleet audit report (JSON, HTML, Markdown, Prometheus)
version_added: 0.1.0
description:
  - Aggregates the C(kubegpu_audit) fact of every host named in O(hosts) into one report
    (schema C(kubegpu.fleet/audit-report) version 1, see C(docs/audit-report.schema.json)) and
    writes it atomically on the controller.
  - Hosts without a finished audit are listed as C(unreachable) or C(failed), never dropped.
  - The task decides the run's verdict and never fails on it - RV(failing) (findings at or above O(fail_on)) and
    RV(coverage_failing) (the GPU nodes the audit did not see, when more than O(max_unaudited) allows); the
    C(kubegpu.fleet.audit) role's report step fails once on either, after the reports are written.
  - The C(security.<component>) findings are grouped by CVE across the fleet - the report's C(cves)
    list (id, highest CVSS, severity, components, affected node count and names, fixed versions,
    advisories, sources), a CVE table in the HTML and Markdown files and the
    C(kubegpu_cve_affected_nodes{cve,component,severity}) and C(kubegpu_cve_max_cvss{cve,severity})
    metrics. Without security findings none of these appear (the JSON list is empty).
  - The report states how current the known-bad catalog is - its newest bulletin, that bulletin's
    revision date and age - and warns when it is older than O(catalog_max_age_days).
  - Reports are written in check mode as well (they are controller-side output, nodes are
    untouched) and the task never reports a change.
options:
  hosts:
    description:
      - Inventory hostnames that were audited (their C(kubegpu_audit) facts are the report).
      - Not used with O(store).
    type: list
    elements: str
    default: []
  store:
    description:
      - Build the fleet report of a run from the results M(kubegpu.fleet.audit_publish) published -
        C(kubernetes) (the Nodes' annotations, one list of Nodes) or C(directory) (O(path)) - instead of
        from O(hosts).
      - Every stored result is checked (size, schema, node name, run id, digest); one that fails is not
        used, its node is listed as C(not_audited) with the reason and the report's C(changes.rejected)
        names it.
      - Every node of the run's O(scope) that has no result of the run is listed with status C(not_audited).
      - Each finding gets C(first_seen), C(known_days) and C(change) (C(new) or C(persisting)), each node
        C(previous_run) and C(resolved) (findings of its previous result that are gone), and the report a
        C(changes) section with the fleet's new, resolved and persisting findings.
    type: str
    choices: [kubernetes, directory]
  path:
    description: The result directory for O(store=directory).
    type: path
  run_id:
    description:
      - The run to report (the id M(kubegpu.fleet.audit_publish) returned).
      - Default - the run of the newest result in the store.
    type: str
  known_nodes:
    description:
      - Inventory hostnames (a host's C(kubegpu_node_name) names its Node) or node names the inventory
        knows; those without a result of the run are listed as C(not_audited).
    type: list
    elements: str
    default: []
  scope:
    description:
      - The nodes the run declared it covers, for O(store).
      - C(fleet) - the whole fleet - every GPU Node of the cluster (with O(store=kubernetes)), every node in
        O(known_nodes) and every node the store holds a result of; a node no slice covered is C(not_audited)
        (an inventory that lost a node shows).
      - C(targets) - the run was pointed at part of the fleet (a pool, C(kubegpu_targets), C(--limit)) - only
        O(known_nodes) (and the nodes the run itself published) are in scope; the cluster's other GPU Nodes
        and stored results of other nodes are out of scope, counted in the report's C(run.nodes_out_of_scope)
        (named in C(run.out_of_scope)), never listed as not audited.
    type: str
    default: fleet
    choices: [fleet, targets]
  select:
    description:
      - A view of the run - only the nodes a JMESPath expression chooses from its published results (the
        document M(kubegpu.fleet.audit_select) describes), for example a pool's nodes with a known-bad driver.
        Needs O(store). The report's C(run.selection) gives the expression and how many nodes it chose.
      - The expression is compiled before the store is read; an invalid one, or a result that is not a list of
        the run's nodes, fails the task with the reason.
    type: str
  dest:
    description: Directory on the controller for the report files.
    type: path
    required: true
  formats:
    description:
      - Which files to write. C(json) = C(kubegpu-audit.json), C(html) = C(kubegpu-audit.html),
        C(markdown) = C(kubegpu-audit.md), C(prometheus) = C(kubegpu_audit.prom) (node_exporter
        textfile collector format).
    type: list
    elements: str
    choices: [json, html, markdown, prometheus]
    default: [json, html, markdown, prometheus]
  fail_on:
    description: Severity at or above which findings are returned in RV(failing).
    type: str
    choices: [critical, warning, info, never]
    default: critical
  max_unaudited:
    description:
      - How many GPU nodes in the report's scope the audit may fail to see - C(unreachable), C(failed),
        C(not_audited) (no slice covered it) or C(not inspected) (audited, but its probes saw nothing) - before
        RV(coverage_failing) lists them. The GPU nodes in scope are the report's nodes but those that are not a
        GPU node (coverage C(not_gpu_node)); nodes out of O(scope) are not in the report.
      - A whole number of nodes, or a whole percentage of the GPU nodes in scope as a string (V(10%)), rounded
        down as Kubernetes rounds a Deployment's C(maxUnavailable) - 10% of 9 nodes allows 0, of 10 allows 1, of
        19 allows 1. Exactly the allowed number passes; no node in scope passes. At most V(100%), which never
        fails. A negative, fractional or larger value fails the task before anything is read.
      - The default, V(10%), fails a nightly run where a slice failed or a tenth of the fleet went unseen while
        routine churn (a few nodes drained or rebooting) passes; a fleet under 10 GPU nodes allows none. The
        report's C(summary.coverage_limit) (and every format) says the limit and whether it was exceeded.
    type: raw
    default: "10%"
  cluster_findings:
    description: Findings from M(kubegpu.fleet.audit_cluster).
    type: list
    elements: dict
    default: []
  collection_version:
    description:
      - Recorded in the report.
      - Default is the version of the installed collection (its C(MANIFEST.json), or C(galaxy.yml) in a source checkout).
    type: str
  run:
    description: Free-form run metadata recorded in the report (playbook, job id).
    type: dict
    default: {}
  catalog_extra:
    description:
      - The C(catalog_extra) documents the audit used (see M(kubegpu.fleet.audit_node)); the report's
        C(catalog) section dates the bundled catalog plus these.
    type: raw
  catalog_max_age_days:
    description:
      - The report warns (C(catalog.stale), C(catalog.warning), the C(kubegpu_audit_catalog_stale)
        metric) when the newest bulletin the catalog knows was last revised more than this many days
        before the audit, so that a fleet is not told it is clean of advisories published since.
    type: int
    default: 45
  group_label:
    description:
      - A Node label whose values group the nodes in the report's summary (C(summary.by_group)), for
        example the node pool label C(cloud.google.com/gke-nodepool), C(eks.amazonaws.com/nodegroup) or
        C(kubernetes.azure.com/agentpool). The labels are those the cluster pass read for each node.
      - Every node counts in its group, audited or not - a node the audit did not see by its Node's labels as
        the cluster lists it (the report's C(labels_from) says where a node's labels come from); a node known
        only from the inventory has no labels (C(labels_from) null, group null). A node the audit did not see
        counts under its GPU model the same way (GPU Feature Discovery's C(nvidia.com/gpu.product) label).
      - Unset - no grouping (C(summary.by_group) is null).
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - kubegpu.fleet.controller_action
  - kubegpu.fleet.k8s_auth
  - kubegpu.fleet.action_group.k8s
attributes:
  check_mode:
    support: full
    details: Writes the report in check mode too; nothing on the nodes changes.
"""

EXAMPLES = r"""
- name: Write the fleet report
  kubegpu.fleet.audit_report:
    hosts: "{{ query('ansible.builtin.inventory_hostnames', 'gpu_nodes') }}"
    dest: /var/lib/kubegpu/audit

- name: The fleet report of the newest run published on the Nodes (the report step after a sliced audit)
  kubegpu.fleet.audit_report:
    store: kubernetes
    known_nodes: "{{ query('ansible.builtin.inventory_hostnames', 'gpu_nodes') }}"
    dest: /var/lib/kubegpu/audit
    max_unaudited: "5%"   # coverage_failing lists the unseen GPU nodes when more than 5% of them went unseen
  register: fleet_report

- name: Fail on findings or on a fleet the audit did not see enough of
  ansible.builtin.fail:
    msg: "{{ fleet_report.failing | length }} failing finding(s). {{ fleet_report.coverage_limit.message or '' }}"
  when: fleet_report.failing | length > 0 or fleet_report.coverage_failing | length > 0
"""

RETURN = r"""
files:
  description: Format to written path.
  returned: success
  type: dict
summary:
  description: The report's summary section.
  returned: success
  type: dict
failing:
  description:
    - Findings at or above O(fail_on) (node, id, severity, where).
    - A finding of cluster scope (GPU Operator, device plugin, MIG manager, DCGM Exporter) is one entry
      with C(node) null, C(nodes) (the nodes it affects) and C(where) C(cluster (N nodes)).
  returned: success
  type: list
  elements: dict
coverage_failing:
  description:
    - When the audit did not see more GPU nodes in scope than O(max_unaudited) allows, every one of them (node,
      status - C(unreachable), C(failed), C(not_audited) or C(not_inspected) - and why); else empty.
  returned: success
  type: list
  elements: dict
coverage_limit:
  description:
    - The report's C(summary.coverage_limit) without its node list - C(max_unaudited), C(nodes_in_scope),
      C(allowed), C(unaudited), C(by_status), C(exceeded) - and C(message) (null when not exceeded), the
      failure message naming the first 20 nodes not seen.
  returned: success
  type: dict
report:
  description: The whole report document, C(cves) included.
  returned: success
  type: dict
"""
