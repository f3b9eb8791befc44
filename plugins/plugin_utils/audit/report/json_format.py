# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit report as strict JSON (RFC 8259), the schema's own format."""
from __future__ import annotations

import json

from ansible_collections.kubegpu.fleet.plugins.plugin_utils.audit.report.build import RENDER_MAX_DEPTH, json_safe


def render_json(report):
    """Strict JSON (RFC 8259): ``json.loads(text, parse_constant=...)`` never sees NaN/Infinity."""
    return json.dumps(json_safe(report, max_depth=RENDER_MAX_DEPTH), indent=2, sort_keys=False,
                      allow_nan=False) + "\n"
