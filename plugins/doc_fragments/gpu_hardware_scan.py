# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hardware-scan options gpu_facts and audit_node share: the PCI scan and the kernel log's Xid scan.

Their argument specs come from one place too, plugins/module_utils/audit/probe_options.py
(GPU_FACTS), so the defaults here must be those."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  sys_path:
    description:
      - Where the host's sysfs is mounted; NVIDIA GPUs on the PCI bus are read from
        C(<sys_path>/bus/pci/devices) (vendor V(0x10de), display or 3D controller class) and
        compared with the GPUs the driver lists (RV(kubegpu.fleet.gpu_facts#module:ansible_facts.nvidia.presence)).
    type: path
    default: /sys
  xid:
    description:
      - Read the kernel log of this boot for NVIDIA Xid events (C(journalctl -k -b), then
        O(kmsg_path), then C(dmesg)), bounded by O(xid_timeout) and 16 MiB per source
        (RV(kubegpu.fleet.gpu_facts#module:ansible_facts.nvidia.xid)).
      - A larger log keeps its newest 16 MiB, the records that matter. The journal is read
        newest record first (C(journalctl -r)) and stopped at the bound, O(kmsg_path) and
        C(dmesg) are read to their end keeping their last 16 MiB. What was not scanned (the
        oldest part, records the kernel ring buffer had already overwritten, a source that
        timed out), or that no source could be read at all, is said in
        RV(kubegpu.fleet.gpu_facts#module:ansible_facts.nvidia.xid.warning), as a module warning
        and, in the audit, as an C(audit.module_failed) finding (evidence C(probe=gpu_facts),
        C(part=xid), C(error) the warning in words) - never as "no Xid".
    type: bool
    default: true
  xid_timeout:
    description: Seconds each kernel log source may take (a finite number from 0.1 to 600).
    type: float
    default: 10
  kmsg_path:
    description:
      - The kernel ring buffer read when the journal holds no kernel messages (read without
        blocking). Empty skips it.
    type: path
    default: /dev/kmsg
"""
