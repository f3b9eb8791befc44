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
version_added: 0.1.0
description:
  - Sets scalar keys of the NVIDIA Container Runtime configuration
    (C(/etc/nvidia-container-runtime/config.toml)), for instance the mitigation NVIDIA's bulletin
    5659 gave for CVE-2025-23266 where the toolkit cannot be upgraded,
    C(features.disable-cuda-compat-lib-hook = true) (honoured from toolkit 1.17.5, the release
    that introduced the hook).
  - The edit is made on the controller by this module's action plugin with the Python library
    C(tomlkit), which keeps comments, key order and formatting of the rest of the file. Nodes
    need no TOML library; the controller (or execution environment) needs C(tomlkit)
    (C(pip install tomlkit)); without it the task fails saying so and changes nothing.
  - The action plugin runs this module twice at most. First it reads the file (bounded to 1 MiB,
    regular files only, never a FIFO or a device) and returns it. The controller parses it, sets
    each C(table.key) (a missing table or key is added), parses the result again with the
    standard library's C(tomllib) and checks that every value holds and nothing else changed.
    Then, only when a value changes and not in check mode, the module writes the new text,
    given with the sha256 of the bytes the edit was based on; it reads the file again and
    refuses, writing nothing, when the file changed in between.
  - Refused, file untouched, with a message naming the key - a key whose table is an inline
    table (C(features = {...})), a key whose current value is an array or a table, a key that
    crosses a value that is not a table, a file that is not UTF-8 or not valid TOML.
  - Before a change the file is copied byte for byte to C(<path>.<timestamp>.<ns>.bak) (mode 0600);
    the new content is written to a temp file in the same directory, given the file's owner and
    mode, and renamed over the file (atomic).
  - Written as root, the file must be root's alone. The task fails, changing nothing (in check
    mode too), with a message naming the part and the reason, when the file, or any directory on
    its path, is owned by another user than root or is writable by group or others (a root-owned
    sticky directory such as C(/tmp) is accepted on the path, not as the file's directory), when a
    symlink on the path or the file itself is a symlink another user owns, or when it is not a
    regular file.
  - A C(config.toml) that is a symlink owned by root keeps its link - the link's target is
    edited and written atomically in the target's own directory (where the backup goes too),
    which must pass the same checks. The link is never replaced by a regular file.
  - Nothing is restarted; the caller restarts the container runtime when the task reports a change
    (new containers read the file when they start).
  - Run without its action plugin (the module file executed on its own, or a copied AnsiballZ
    payload), the module changes nothing when it gets O(settings) without O(content) and fails
    saying that the action plugin does the edit.
author:
  - kubegpu.fleet maintainers (@kubegpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
    details: The edit is computed on the controller (tomlkit); the node reads and writes the file.
  async:
    support: none
  bypass_host_loop:
    support: none
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
        C({"features.disable-cuda-compat-lib-hook": true}). Nested tables are dotted
        (C(nvidia-container-runtime.modes.legacy.cuda-compat-mode)); key parts are bare keys
        (letters, digits, C(-) and C(_)).'
    type: dict
    required: true
  backup:
    description: Copy the file to a 0600 backup beside it before changing it.
    type: bool
    default: true
  read:
    description:
      - Internal, set by the action plugin (a task must not set it) - only read the file and
        return it as RV(content_b64) with its RV(sha256).
    type: bool
    default: false
  content:
    description:
      - Internal, set by the action plugin (a task must not set it) - the new text of the file,
        edited on the controller. Requires O(expected_sha256).
    type: str
  expected_sha256:
    description:
      - Internal, set by the action plugin (a task must not set it) - the sha256 of the bytes
        O(content) was made from; the module refuses to write when the file holds other bytes.
    type: str
notes:
  - The action plugin refuses O(read), O(content) and O(expected_sha256) in a task.
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
content_b64:
  description: Internal, for the action plugin - the file's bytes, base64.
  returned: when O(read=true)
  type: str
sha256:
  description: Internal, for the action plugin - the sha256 of the file's bytes (hex).
  returned: when O(read=true)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.fleet.plugins.module_utils.stack.config_file import toolkit_config_run
from ansible_collections.kubegpu.fleet.plugins.module_utils._common.node_probes import run_probe_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/nvidia-container-runtime/config.toml"),
            settings=dict(type="dict", required=True),
            backup=dict(type="bool", default=True),
            read=dict(type="bool", default=False),
            content=dict(type="str"),
            expected_sha256=dict(type="str"),
        ),
        mutually_exclusive=[("read", "content")],
        required_together=[("content", "expected_sha256")],
        supports_check_mode=True,
    )
    run_probe_module(module, toolkit_config_run, module.params, check_mode=module.check_mode)


if __name__ == "__main__":
    main()
