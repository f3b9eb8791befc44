#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: toolkit_config
short_description: Set keys of the NVIDIA Container Toolkit's config.toml (mitigation settings)
version_added: 0.2.0
description:
  - Sets scalar keys of the NVIDIA Container Runtime configuration
    (C(/etc/nvidia-container-runtime/config.toml)), for instance the mitigation NVIDIA's bulletin
    5659 gave for CVE-2025-23266 where the toolkit cannot be upgraded,
    C(features.disable-cuda-compat-lib-hook = true) (honoured from toolkit 1.17.5, the release
    that introduced the hook).
  - Each key is edited on its own line; comments and the rest of the file are kept. A missing key
    is added to its table, a missing table appended. The module refuses files it cannot edit
    line by line (multi-line strings, the table as an inline table, a key set twice) and leaves
    them untouched.
  - Before a change the file is copied byte for byte to C(<path>.<timestamp>.bak) (mode 0600);
    the new content is written to a temp file and renamed over the file (atomic).
  - Nothing is restarted; the caller restarts the container runtime when the task reports a change
    (new containers read the file when they start).
author:
  - kubegpu.fleet maintainers (@kubegpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports the change and the diff; writes nothing.
  diff_mode:
    support: full
    details: Before/after text of the file.
  platform:
    platforms: posix
options:
  path:
    description: The configuration file. It must exist (the toolkit packages install it).
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  settings:
    description:
      - 'Keys to set, C(table.key) -> value (boolean, integer or string), for instance
        C({"features.disable-cuda-compat-lib-hook": true}).'
    type: dict
    required: true
  backup:
    description: Copy the file to a 0600 backup beside it before changing it.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Mitigate CVE-2025-23266 where the toolkit cannot be upgraded (toolkit 1.17.5 to 1.17.7)
  kubegpu.fleet.toolkit_config:
    settings:
      features.disable-cuda-compat-lib-hook: true
  register: ctk_config

- name: Restart containerd so that the runtime's next containers see it
  ansible.builtin.systemd_service:
    name: containerd
    state: restarted
  when: ctk_config is changed
"""

RETURN = r"""
path:
  description: The file.
  returned: always
  type: str
changes:
  description: Keys that changed, with the value as written before (null when absent) and after.
  returned: always
  type: list
  elements: dict
  sample: [{"key": "features.disable-cuda-compat-lib-hook", "before": null, "after": "true"}]
backup_file:
  description: The backup of the file before the change.
  returned: when changed and not in check mode and O(backup=true)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import fileutil
from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.toml_edit import TomlEditError, render, set_key

LIMIT = 1 << 20


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/nvidia-container-runtime/config.toml"),
            settings=dict(type="dict", required=True),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    settings = module.params["settings"]
    result = dict(changed=False, path=path, changes=[])
    if not settings:
        module.fail_json(msg="settings is empty: name at least one table.key to set", **result)
    try:
        safe_io.check_path(path, "path")
        data = safe_io.read_bytes(path, LIMIT, missing_ok=True)
    except (safe_io.UnsafeInput, OSError) as e:
        module.fail_json(msg="cannot read %s: %s" % (path, e), **result)
    if data is None:
        module.fail_json(msg="%s does not exist: install nvidia-container-toolkit-base (it ships the file) "
                             "or name the right path" % path, **result)
    try:
        before = data.decode("utf-8")
    except UnicodeDecodeError as e:
        module.fail_json(msg="%s is not UTF-8 text (%s); refusing to edit it" % (path, e), **result)
    text = before
    for key in sorted(settings):
        value = settings[key]
        try:
            text, changed, old = set_key(text, key, value)
        except TomlEditError as e:
            module.fail_json(msg="%s: cannot set %s: %s" % (path, key, e), **result)
        if changed:
            result["changes"].append({"key": key, "before": old, "after": render(value)})
    result["changed"] = text != before
    if result["changed"] and not module.check_mode:
        try:
            if module.params["backup"]:
                result["backup_file"] = fileutil.backup_file(path)
            fileutil.atomic_write(path, text)
        except fileutil.FileOpError as e:
            module.fail_json(msg=str(e), **result)
    if module._diff:
        result["diff"] = {"before": before, "after": text, "before_header": path, "after_header": path}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
