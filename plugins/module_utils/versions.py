# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Transitional alias of ``module_utils/_common/versions.py`` (where version parsing now lives).

Kept only while ``plugins/plugin_utils/remediation.py`` still imports the old path; remove it
once that import reads ``module_utils._common.versions``. Nothing else may import it.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.fleet.plugins.module_utils._common.versions import (  # noqa: F401  pylint: disable=unused-import
    DevicePluginVersion,
    DriverVersion,
    SemVer,
    driver_branch,
    in_range,
    parse_driver_version,
    strip_package_revision,
)
