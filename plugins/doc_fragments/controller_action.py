# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes shared by the controller-side audit actions (audit_cluster, audit_evaluate, audit_report)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: all
    details: Runs on the controller only; it never connects to a host.
author:
  - kubegpu.fleet maintainers (@kubegpu)
"""
