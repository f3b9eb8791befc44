# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Xid events from the kernel log, classified with NVIDIA's Xid catalog (node side, 3.8+).

The NVIDIA kernel driver reports GPU errors as ``NVRM: Xid (PCI:0000:17:00): 79, pid=...,
name=..., GPU has fallen off the bus.`` (older drivers: ``NVRM: Xid (0000:03:00): 14, ...``).
:func:`parse_xid_events` finds them in kernel log text whatever the record prefix (``journalctl
-k -o short-monotonic`` / ``-o json``, ``dmesg``, raw ``/dev/kmsg`` records), bounded in lines,
bytes and line length; :func:`read_kernel_log` gets that text since boot from the journal, else
``/dev/kmsg``, else ``dmesg``, each bounded in time and size and keeping the newest part when
the log is larger (:func:`scan_warning` says what was not scanned, or that nothing could be
read: never a silent "no Xid"); :func:`classify` maps an Xid to the resolution bucket NVIDIA's
catalog documents and :func:`aggregate` folds events per GPU. Every catalog entry is sourced
in docs/hardware-health.md.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.pci import normalize_bus_id

MAX_BYTES = 16 << 20        # kernel ring buffers are at most a few MiB; journals since boot more
MAX_LINES = 200000
# Longer lines are cut before matching: printk records are far shorter and a journal JSON
# record with all its fields a few KiB, so a longer line is no driver record.
MAX_LINE = 16384
MAX_EVENTS = 10000
MAX_MESSAGE = 300

# --------------------------------------------------------------------------- catalog

# Actions, least to most severe. "reset_gpu" and "reboot" take the node out of service;
# "investigate" needs a person (NVIDIA: contact support / named workflow); "unknown" is an Xid
# NVIDIA's catalog gives no immediate action for (or one this table does not carry): reported as
# such, never acted on and never hands-on.
ACTIONS = ("none", "ignore", "restart_app", "unknown", "investigate", "reset_gpu", "reboot")
_RANK = dict((a, i) for i, a in enumerate(ACTIONS))

# Catalog resolution bucket (immediate action) -> action of this collection.
BUCKET_ACTIONS = {
    "IGNORE": "ignore",
    "RESTART_APP": "restart_app",
    # Xid 45: "Preemptive cleanup, due to previous errors"; its workflow follows the other Xid.
    "WORKFLOW_XID_45": "restart_app",
    "CONTACT_SUPPORT": "investigate",
    "CHECK_MECHANICALS": "investigate",
    "UPDATE_SWFW": "investigate",
    "CHECK_UVM": "investigate",
    "WORKFLOW_NVLINK_ERR": "investigate",
    "RESET_GPU": "reset_gpu",
    # Xid 48's workflow: an uncorrectable DRAM error marks the row for remapping, which only
    # takes effect at the next GPU reset (memory error management guide, "Row Remapping").
    "WORKFLOW_XID_48": "reset_gpu",
    "RESTART_VM": "reboot",
    "RESTART_BM": "reboot",
}
# Decided per record, not per bucket: Xid 154 names the driver's new recovery action; the
# NVLink5 Xids 144-150 say in their text whether the error was fatal (catalog sheet "XID 144-150
# Decode": the fatal rows are RESET_GPU, the non-fatal ones IGNORE or "evaluate Xid 154").
XID_154 = "XID_154"
NVLINK5 = "WORKFLOW_NVLINK5_ERR"

# Xid -> (mnemonic, NVIDIA's immediate-action bucket or None, NVIDIA's description): every row
# of NVIDIA's Xid catalog ("Analyzing Xid Errors with the Xid Catalog", sheet "Catalog", 172
# rows as generated from it on 2025-10-29; docs/hardware-health.md has the sources).
CATALOG = {
    1: ('ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    2: ('ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    3: ('ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    4: ('ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY', 'CONTACT_SUPPORT', 'Unused'),
    5: ('ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW', 'CONTACT_SUPPORT', 'Unused'),
    6: ('ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR', 'CONTACT_SUPPORT', 'Unused'),
    7: ('ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR', 'CONTACT_SUPPORT', 'Unused'),
    8: ('ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT', 'RESTART_APP', 'GPU stopped processing'),
    9: ('ROBUST_CHANNEL_GR_ERROR_INSTANCE', 'CONTACT_SUPPORT', 'Unused'),
    10: ('ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP', 'CONTACT_SUPPORT', 'Unused'),
    11: ('ROBUST_CHANNEL_GR_ERROR_MISSING_HW', 'RESTART_APP', 'Invalid or corrupted push buffer stream'),
    12: ('ROBUST_CHANNEL_GR_ERROR_SW_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    13: ('ROBUST_CHANNEL_GR_EXCEPTION/ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY', 'RESTART_APP', 'Graphics Engine Exception'),
    14: ('ROBUST_CHANNEL_FAKE_ERROR', 'IGNORE', 'Unused'),
    15: ('ROBUST_CHANNEL_SCANLINE_TIMEOUT', 'CONTACT_SUPPORT', 'Unused'),
    16: ('ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT', 'CONTACT_SUPPORT', 'Unused'),
    17: ('ROBUST_CHANNEL_PARAMETER_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    18: ('ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    19: ('ROBUST_CHANNEL_DISP_MISSED_NOTIFIER', 'CONTACT_SUPPORT', 'Unused'),
    20: ('ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    21: ('ROBUST_CHANNEL_ME_ERROR_SW_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    22: ('ROBUST_CHANNEL_VP_ERROR_SW_METHOD', 'CONTACT_SUPPORT', 'Unused'),
    23: ('ROBUST_CHANNEL_RC_LOGGING_ENABLED', 'CONTACT_SUPPORT', 'Unused'),
    24: ('ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT', 'CONTACT_SUPPORT', 'Unused'),
    25: ('ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY', 'RESTART_APP', 'Invalid or illegal push buffer stream'),
    26: ('ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT', 'CONTACT_SUPPORT', 'Unused'),
    27: ('ROBUST_CHANNEL_VP_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    28: ('ROBUST_CHANNEL_VP2_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    29: ('ROBUST_CHANNEL_BSP_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    30: ('ROBUST_CHANNEL_BAD_ADDR_ACCESS', 'CONTACT_SUPPORT', 'Unused'),
    31: ('ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT', 'RESTART_APP', 'GPU memory page fault'),
    32: ('ROBUST_CHANNEL_PBDMA_ERROR', 'RESTART_APP', 'Invalid or corrupted push buffer stream'),
    33: ('ROBUST_CHANNEL_SEC_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    34: ('ROBUST_CHANNEL_MSVLD_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    35: ('ROBUST_CHANNEL_MSPDEC_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    36: ('ROBUST_CHANNEL_MSPPP_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    37: ('ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD', 'IGNORE', 'Driver firmware error'),
    38: ('ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT', 'IGNORE', 'Driver firmware error'),
    39: ('ROBUST_CHANNEL_CE0_ERROR', 'RESTART_APP', 'Copy Engine Exception'),
    40: ('ROBUST_CHANNEL_CE1_ERROR', 'RESTART_APP', 'Copy Engine Exception'),
    41: ('ROBUST_CHANNEL_CE2_ERROR', 'RESTART_APP', 'Copy Engine Exception'),
    42: ('ROBUST_CHANNEL_VIC_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    43: ('ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR', 'IGNORE', 'GPU stopped processing'),
    44: ('ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW', 'IGNORE', 'Graphics Engine fault during context switch'),
    45: ('ROBUST_CHANNEL_PREEMPTIVE_REMOVAL', 'WORKFLOW_XID_45',
         'Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda applications and hitting a DBE'),
    46: ('ROBUST_CHANNEL_GPU_TIMEOUT_ERROR', 'RESET_GPU', 'GPU stopped processing'),
    47: ('ROBUST_CHANNEL_NVENC0_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    48: ('ROBUST_CHANNEL_GPU_ECC_DBE', 'WORKFLOW_XID_48', 'Double Bit ECC Error'),
    49: ('SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY', 'CONTACT_SUPPORT', 'Unused'),
    50: ('SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    51: ('SILENT_RUNNING_STRESS_TEST_FAILURE', 'CONTACT_SUPPORT', 'Unused'),
    52: ('SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE', 'CONTACT_SUPPORT', 'Unused'),
    53: ('SILENT_RUNNING_TEMP_REDUCED_CLOCKING', 'CONTACT_SUPPORT', 'Unused'),
    54: ('SILENT_RUNNING_PWR_REDUCED_CLOCKING', 'CHECK_MECHANICALS', 'Auxiliary power is not connected to the GPU board'),
    55: ('SILENT_RUNNING_TEMPERATURE_READ_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    56: ('DISPLAY_CHANNEL_EXCEPTION', 'CONTACT_SUPPORT', 'Unused'),
    57: ('FB_LINK_TRAINING_FAILURE_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    58: ('FB_MEMORY_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    59: ('PMU_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    60: ('ROBUST_CHANNEL_SEC2_ERROR', 'RESTART_APP', 'Video processor exception'),
    61: ('PMU_BREAKPOINT', 'CONTACT_SUPPORT', 'Unused'),
    62: ('PMU_HALT_ERROR', 'RESET_GPU', 'Internal micro-controller halt (newer drivers)'),
    63: ('INFOROM_DRAM_RETIREMENT_EVENT', 'IGNORE', 'GPU memory remapping event'),
    64: ('INFOROM_DRAM_RETIREMENT_FAILURE', 'RESET_GPU', 'GPU memory remapping failure'),
    65: ('ROBUST_CHANNEL_NVENC1_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    66: ('ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION', 'IGNORE', 'Illegal access by driver'),
    67: ('ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION', 'IGNORE', 'Illegal access by driver'),
    68: ('ROBUST_CHANNEL_NVDEC0_ERROR', 'RESTART_APP', 'NVDEC0 Exception'),
    69: ('ROBUST_CHANNEL_GR_CLASS_ERROR', 'RESTART_APP', 'Graphics Engine class error'),
    70: ('ROBUST_CHANNEL_CE3_ERROR', 'RESTART_APP', 'CE3: Unknown Error'),
    71: ('ROBUST_CHANNEL_CE4_ERROR', 'RESTART_APP', 'CE4: Unknown Error'),
    72: ('ROBUST_CHANNEL_CE5_ERROR', 'RESTART_APP', 'CE5: Unknown Error'),
    73: ('ROBUST_CHANNEL_NVENC2_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    74: ('NVLINK_ERROR', 'WORKFLOW_NVLINK_ERR', 'NVLINK Error'),
    75: ('ROBUST_CHANNEL_CE6_ERROR', 'RESTART_APP', 'CE6: Unknown Error'),
    76: ('ROBUST_CHANNEL_CE7_ERROR', 'RESTART_APP', 'CE7: Unknown Error'),
    77: ('ROBUST_CHANNEL_CE8_ERROR', 'RESTART_APP', 'CE8: Unknown Error'),
    78: ('VGPU_START_ERROR', 'UPDATE_SWFW', 'vGPU Start Error'),
    79: ('ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS', 'RESTART_BM', 'GPU has fallen off the bus'),
    80: ('PBDMA_PUSHBUFFER_CRC_MISMATCH', 'RESTART_APP', 'Corrupted data sent to GPU'),
    81: ('ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    82: ('ROBUST_CHANNEL_NVJPG0_ERROR', 'RESTART_APP', 'NVJPG0 Error'),
    83: ('ROBUST_CHANNEL_NVDEC1_ERROR', 'RESTART_APP', 'NVDEC1 Error'),
    84: ('ROBUST_CHANNEL_NVDEC2_ERROR', 'RESTART_APP', 'NVDEC2 Error'),
    85: ('ROBUST_CHANNEL_CE9_ERROR', 'RESTART_APP', 'CE9: Unknown Error'),
    86: ('ROBUST_CHANNEL_OFA0_ERROR', 'RESTART_APP', 'OFA Exception'),
    87: ('NVTELEMETRY_DRIVER_REPORT', 'CONTACT_SUPPORT', 'Unused'),
    88: ('ROBUST_CHANNEL_NVDEC3_ERROR', 'RESTART_APP', 'NVDEC3 Error'),
    89: ('ROBUST_CHANNEL_NVDEC4_ERROR', 'RESTART_APP', 'NVDEC4 Error'),
    90: ('LTC_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    91: ('RESERVED_XID', 'CONTACT_SUPPORT', 'Unused'),
    92: ('EXCESSIVE_SBE_INTERRUPTS', 'IGNORE', 'High single-bit ECC error rate'),
    93: ('INFOROM_ERASE_LIMIT_EXCEEDED', 'IGNORE', 'Non-fatal violation of provisioned InfoROM wear limit'),
    94: ('ROBUST_CHANNEL_CONTAINED_ERROR', 'RESTART_APP', 'Contained memory error'),
    95: ('ROBUST_CHANNEL_UNCONTAINED_ERROR', 'RESET_GPU', 'Uncontained memory error'),
    96: ('ROBUST_CHANNEL_NVDEC5_ERROR', 'RESTART_APP', 'NVDEC5 Error'),
    97: ('ROBUST_CHANNEL_NVDEC6_ERROR', 'RESTART_APP', 'NVDEC6 Error'),
    98: ('ROBUST_CHANNEL_NVDEC7_ERROR', 'RESTART_APP', 'NVDEC7 Error'),
    99: ('ROBUST_CHANNEL_NVJPG1_ERROR', 'RESTART_APP', 'NVJPG1 Error'),
    100: ('ROBUST_CHANNEL_NVJPG2_ERROR', 'RESTART_APP', 'NVJPG2 Error'),
    101: ('ROBUST_CHANNEL_NVJPG3_ERROR', 'RESTART_APP', 'NVJPG3 Error'),
    102: ('ROBUST_CHANNEL_NVJPG4_ERROR', 'RESTART_APP', 'NVJPG4 Error'),
    103: ('ROBUST_CHANNEL_NVJPG5_ERROR', 'RESTART_APP', 'NVJPG5 Error'),
    104: ('ROBUST_CHANNEL_NVJPG6_ERROR', 'RESTART_APP', 'NVJPG6 Error'),
    105: ('ROBUST_CHANNEL_NVJPG7_ERROR', 'RESTART_APP', 'NVJPG7 Error'),
    106: ('SMBPBI_TEST_MESSAGE', 'IGNORE', 'SMBPBI Test Message'),
    107: ('SMBPBI_TEST_MESSAGE_SILENT', 'IGNORE', 'SMBPBI Test Message Silent'),
    108: ('NVLINK_REMOTE_TRANSLATION_ERROR', 'IGNORE', 'Unused'),
    109: ('ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR', 'RESET_GPU', 'Context Switch Timeout Error'),
    110: ('SEC_FAULT_ERROR', 'RESET_GPU', 'Security Fault Error'),
    111: ('BUNDLE_ERROR_EVENT', 'CONTACT_SUPPORT', 'Unused'),
    112: ('DISP_SUPERVISOR_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    113: ('DP_LT_FAILURE', 'CONTACT_SUPPORT', 'Unused'),
    114: ('HEAD_RG_UNDERFLOW', 'CONTACT_SUPPORT', 'Unused'),
    115: ('CORE_CHANNEL_REGS', 'CONTACT_SUPPORT', 'Unused'),
    116: ('WINDOW_CHANNEL_REGS', 'CONTACT_SUPPORT', 'Unused'),
    117: ('CURSOR_CHANNEL_REGS', 'CONTACT_SUPPORT', 'Unused'),
    118: ('HEAD_REGS', 'CONTACT_SUPPORT', 'Unused'),
    119: ('GSP_RPC_TIMEOUT', 'RESET_GPU', 'GSP RPC Timeout'),
    120: ('GSP_ERROR', 'RESET_GPU', 'GSP Error'),
    121: ('C2C_ERROR', 'IGNORE', 'C2C Error'),
    122: ('SPI_PMU_RPC_READ_FAIL', 'CONTACT_SUPPORT', 'Unused'),
    123: ('SPI_PMU_RPC_WRITE_FAIL', 'CONTACT_SUPPORT', 'Unused'),
    124: ('SPI_PMU_RPC_ERASE_FAIL', 'CONTACT_SUPPORT', 'Unused'),
    125: ('INFOROM_FS_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    126: ('ROBUST_CHANNEL_CE10_ERROR', 'RESTART_APP', 'CE10: Unknown Error'),
    127: ('ROBUST_CHANNEL_CE11_ERROR', 'RESTART_APP', 'CE11: Unknown Error'),
    128: ('ROBUST_CHANNEL_CE12_ERROR', 'RESTART_APP', 'CE12: Unknown Error'),
    129: ('ROBUST_CHANNEL_CE13_ERROR', 'RESTART_APP', 'CE13: Unknown Error'),
    130: ('ROBUST_CHANNEL_CE14_ERROR', 'RESTART_APP', 'CE14: Unknown Error'),
    131: ('ROBUST_CHANNEL_CE15_ERROR', 'RESTART_APP', 'CE15: Unknown Error'),
    132: ('ROBUST_CHANNEL_CE16_ERROR', 'RESTART_APP', 'CE16: Unknown Error'),
    133: ('ROBUST_CHANNEL_CE17_ERROR', 'RESTART_APP', 'CE17: Unknown Error'),
    134: ('ROBUST_CHANNEL_CE18_ERROR', 'RESTART_APP', 'CE18: Unknown Error'),
    135: ('ROBUST_CHANNEL_CE19_ERROR', 'RESTART_APP', 'CE19: Unknown Error'),
    136: ('ALI_TRAINING_FAIL', 'RESET_GPU', 'Link Training Failed'),
    137: ('NVLINK_PRIV_ERR', 'IGNORE', 'NVLink Privilege Error'),
    138: ('ROBUST_CHANNEL_DLA_ERROR', 'CONTACT_SUPPORT', 'Unused'),
    139: ('ROBUST_CHANNEL_OFA1_ERROR', 'RESTART_APP', 'OFA1 Error'),
    140: ('UNRECOVERABLE_ECC_ERROR_ESCAPE', 'RESET_GPU', 'ECC Unrecovered Error'),
    141: ('ROBUST_CHANNEL_FAST_PATH_ERROR', 'IGNORE', 'CUDA Fast Path Error'),
    142: ('ROBUST_CHANNEL_NVENC3_ERROR', 'CONTACT_SUPPORT', 'NVENC3 Error'),
    143: ('GPU_INIT_ERROR', 'RESET_GPU', 'GPU Initialization Error'),
    144: ('NVLINK_SAW_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: SAW Error'),
    145: ('NVLINK_RLW_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: RLW Error'),
    146: ('NVLINK_TLW_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: TLW Error'),
    147: ('NVLINK_TREX_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: TREX Error'),
    148: ('NVLINK_NVLPW_CTRL_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: NVLPW_CTRL Error'),
    149: ('NVLINK_NETIR_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: NETIR Error'),
    150: ('NVLINK_MSE_ERROR', 'WORKFLOW_NVLINK5_ERR', 'NVLINK: MSE Error'),
    151: ('ROBUST_CHANNEL_KEY_ROTATION_ERROR', 'RESTART_VM', 'Key rotation Error'),
    152: ('ROBUST_CHANNEL_DLA_SMMU_ERROR', 'IGNORE', 'DLA SMMU Error'),
    153: ('ROBUST_CHANNEL_DLA_TIMEOUT', 'IGNORE', 'DLA timeout Error'),
    154: ('GPU_RECOVERY_ACTION_CHANGED', 'XID_154', 'GPU Recovery Action Changed'),
    155: ('NVLINK_SW_DEFINED_ERROR', 'RESET_GPU', 'NVLINK: SW Defined Error'),
    156: ('RESOURCE_RETIREMENT_EVENT', 'RESET_GPU', 'Resource Retirement Event'),
    157: ('RESOURCE_RETIREMENT_FAILURE', 'IGNORE', 'Resource Retirement Failure'),
    158: ('GPU_FATAL_TIMEOUT', 'RESET_GPU', 'GPU Fatal Timeout'),
    159: ('ROBUST_CHANNEL_CHI_NON_DATA_ERROR', 'CHECK_UVM', 'CHI Non-Data Error'),
    160: ('CHANNEL_RETIREMENT_EVENT', 'IGNORE', 'Channel Retirement Event'),
    161: ('CHANNEL_RETIREMENT_FAILURE', 'IGNORE', 'Channel Retirement Failure'),
    162: ('PSHC_REENGAGED', None, 'Power Smoothing HW Circuitry capability reengaged'),
    163: ('PSHC_DISENGAGED', None, 'Power Smoothing HW Circuitry capability disengaged'),
    164: ('PSHC_LOW_LIFETIME', None, 'Power Smoothing HW Circuitry low lifetime reached'),
    165: ('PSHC_ZERO_LIFETIME', None, 'Power Smoothing HW Circuitry lifetime exhausted'),
    166: ('NVLINK_SECURE_CRYPTO_ERR', None, 'CC traffic seen prior to link properly being configured for encrypted traffic'),
    167: ('PCIE_FATAL_TIMEOUT', None, 'PCIE_FATAL_TIMEOUT'),
    168: ('REDUCED_GPU_MEMORY_CAPACITY', None, 'Errors found in WPR (write protected region)'),
    169: ('SEC2_HALT_ERROR', None, 'Internal micro-controller halt'),
    170: ('NVLINK_SECURE_OTHER', None, 'Interrupt seen in CC mode'),
    171: ('UNCORRECTABLE_DRAM_ERROR', None, 'Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM'),
    172: ('UNCORRECTABLE_SRAM_ERROR', None, 'Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM'),
}
# Rows the catalog lists without an immediate action that NVIDIA documents as companions of
# another Xid: 171 (DRAM) and 172 (SRAM) add detail to Xid 48 and follow its workflow (memory
# error management guide, "User Visible Statistics").
COMPANIONS = {171: 48, 172: 48}

# Xid 154 names the new recovery action: "... to 0x1 (GPU Reset Required)". NVML's
# nvmlGpuRecoveryAction_t: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset,
# 5 recover IMEX domain, 6 bus reset, 7 system reboot.
RECOVERY_CODES = {0: "none", 1: "reset_gpu", 2: "reboot", 3: "investigate", 4: "reset_gpu",
                  5: "investigate", 6: "reboot", 7: "reboot"}
_RECOVERY_RE = re.compile(r"to\s+0x([0-9A-Fa-f]{1,8})")
_NVLINK5_SEVERITY_RE = re.compile(r"\b(Nonfatal|Non-fatal|Fatal)\b")


def worse(a, b):
    """The more severe of two actions."""
    return a if _RANK.get(a, _RANK["unknown"]) >= _RANK.get(b, _RANK["unknown"]) else b


def rank(action):
    return _RANK.get(action, _RANK["unknown"])


def classify(xid, message=None):
    """``{"xid", "mnemonic", "bucket", "action", "meaning", "known"}`` for one Xid record.

    ``known`` is False for an Xid outside NVIDIA's catalog; its action is then ``unknown``."""
    entry = CATALOG.get(xid)
    if entry is None:
        return {"xid": xid, "mnemonic": None, "bucket": None, "action": "unknown",
                "meaning": "not in NVIDIA's Xid catalog", "known": False}
    mnemonic, bucket, meaning = entry
    if xid in COMPANIONS:
        base = classify(COMPANIONS[xid], message)
        return {"xid": xid, "mnemonic": mnemonic, "bucket": base["bucket"],
                "action": base["action"], "meaning": "%s (companion of Xid %d)" % (meaning, COMPANIONS[xid]),
                "known": True}
    if bucket == XID_154:
        action = "unknown"
        m = _RECOVERY_RE.search(message or "")
        if m:
            action = RECOVERY_CODES.get(int(m.group(1), 16), "unknown")
    elif bucket == NVLINK5:
        m = _NVLINK5_SEVERITY_RE.search(message or "")
        if m is None:
            action = "investigate"
        elif m.group(1) == "Fatal":
            action = "reset_gpu"
        else:
            action = "ignore"
    elif bucket is None:
        action = "unknown"
        meaning = "%s (NVIDIA's catalog gives no immediate action)" % meaning
    else:
        action = BUCKET_ACTIONS.get(bucket, "unknown")
    return {"xid": xid, "mnemonic": mnemonic, "bucket": bucket, "action": action,
            "meaning": meaning, "known": True}


# --------------------------------------------------------------------------- parsing

# The Xid record itself, wherever it sits in the line. The open driver (kernel_rc.c) prints
# "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ..." and, for an Xid it attributes to a MIG instance,
# "(PCI:%04x:%02x:%02x GPU-I:%02u)" or "(PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u)".
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"(?: GPU-I:([0-9]{1,3}))?(?: GPU-CI:([0-9]{1,3}))?\):"
    r"\s*(\d{1,5})(?:,\s*(.*))?$")
# NVSwitch driver: "nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, <Fatal|Non-fatal>, ..."
# (common_nvswitch.h NVSWITCH_PRINT_SXID; intr_nvswitch.h prints "Fatal, Link %02d" or
# "Non-fatal, Link %02d"; further lines of the same record carry "Severity ..." / "Data {...}").
_SXID_RE = re.compile(
    r"nvidia-(nvswitch[0-9]{1,3}): SXid \(PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\):"
    r"\s*(\d{1,5})(?:,\s*(.*))?$")
# Records the driver writes without an Xid number:
# osinit.c: NV_DEV_PRINTF(.., "GPU has fallen off the bus.\n") -> "NVRM: GPU 0000:91:00.0: GPU has
# fallen off the bus." (after Xid 79 only when the driver emits the Xid);
# osapi.c (probe): "NVRM: The NVIDIA GPU %04x:%02x:%02x.%x\nNVRM: (PCI ID: %04x:%04x) installed in
# this system has\nNVRM: fallen off the bus and is not responding to commands." - one record of
# three lines, so the text can sit on the next lines (dmesg, journal) or on one line with the
# newlines escaped as \x0a (/dev/kmsg);
# osinit.c: NV_DEV_PRINTF(.., "RmInitAdapter failed! (0x%x:0x%x:%d)\n").
_DEV_RE = re.compile(r"NVRM: GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]): (.*)$")
_PROBE_LOST_RE = re.compile(r"NVRM: The NVIDIA GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_FALLEN = "fallen off the bus"
_PROBE_LOOKAHEAD = 3  # the probe record's "fallen off the bus" is at most two lines further
_PID_RE = re.compile(r"^pid=('[^']*'|[^,]*),\s*name=([^,]*),\s*(.*)$")
_PID_ONLY_RE = re.compile(r"^pid=('[^']*'|[^,]*),\s*(.*)$")
# "[ 1234.567890] ..." (dmesg, journalctl -o short-monotonic). Numbers are bounded in digits (and
# ASCII only) so that no field converts to an infinite or oversized number.
_BRACKET_TS_RE = re.compile(r"^\[\s*([0-9]{1,12})\.([0-9]{1,9})\]")
# /dev/kmsg record: "<prio>,<seq>,<usec>,<flags>[,...];<text>"
_KMSG_RE = re.compile(r"^([0-9]{1,3}),([0-9]{1,20}),([0-9]{1,20}),[^;]*;")
_JSON_BYTES_RE = re.compile(r'"MESSAGE"\s*:\s*\[')
_MARKERS = ("NVRM: Xid", "SXid (", "NVRM: GPU ", "NVRM: The NVIDIA GPU")


def _as_text(data):
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def _json_message(line):
    """(message, monotonic seconds) of one ``journalctl -o json`` record, or (None, None)."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than json recurses
        return None, None
    if not isinstance(rec, dict):
        return None, None
    msg = rec.get("MESSAGE")
    if isinstance(msg, list):  # journald exports non-UTF-8 messages as byte arrays
        try:
            msg = bytes(bytearray(b & 0xFF for b in msg if isinstance(b, int))).decode("utf-8", "replace")
        except (TypeError, ValueError):
            msg = None
    if not isinstance(msg, str):
        return None, None
    ts = None
    mono = rec.get("__MONOTONIC_TIMESTAMP")
    if isinstance(mono, str) and safe_io.is_ascii_digits(mono) and len(mono) <= 20:
        ts = int(mono) / 1e6
    elif isinstance(mono, int) and not isinstance(mono, bool) and 0 <= mono < 10 ** 20:
        ts = mono / 1e6
    return msg, ts


def _split_record(line):
    """(text, timestamp) of one log line whatever its format; text None for broken JSON."""
    ts = None
    if line.startswith("{"):
        return _json_message(line)
    m = _KMSG_RE.match(line)
    if m:
        ts = int(m.group(3)) / 1e6
    else:
        m = _BRACKET_TS_RE.match(line)
        if m:
            ts = float("%s.%s" % (m.group(1), m.group(2)))
    return line, ts


def _pid_fields(rest):
    pid = process = None
    pm = _PID_RE.match(rest)
    if pm:
        pid, process, rest = pm.group(1).strip("'"), pm.group(2).strip() or None, pm.group(3)
    else:
        pm = _PID_ONLY_RE.match(rest)
        if pm:
            pid, rest = pm.group(1).strip("'"), pm.group(2)
    if pid in ("", "N/A"):
        pid = None
    return pid, process, rest


def _event(kind, bus_id, xid, ts, message, pid=None, process=None, gi=None, ci=None):
    return {"kind": kind, "bus_id": bus_id, "xid": xid, "pid": pid, "process": process,
            "message": (message or "").strip()[:MAX_MESSAGE], "timestamp": ts,
            "gpu_instance": gi, "compute_instance": ci}


def _parse_text(text, ts, following=()):
    """One event dict from one record's text, or None. ``following``: the next lines' texts
    (the probe's fallen-off-the-bus record spans three lines)."""
    pos = text.find("NVRM: Xid (")
    if pos >= 0:
        m = _XID_RE.match(text[pos:].rstrip("\r\n"))
        if not m:
            return None
        bus_id = normalize_bus_id(m.group(1))
        if bus_id is None:
            return None
        pid, process, rest = _pid_fields((m.group(5) or "").strip())
        gi = int(m.group(2)) if m.group(2) else None
        ci = int(m.group(3)) if m.group(3) else None
        return _event("xid", bus_id, int(m.group(4)), ts, rest, pid, process, gi, ci)
    pos = text.find("SXid (")
    if pos >= 0:
        m = _SXID_RE.search(text.rstrip("\r\n"))
        if not m:
            return None
        bus_id = normalize_bus_id(m.group(2))
        if bus_id is None:
            return None
        rest = (m.group(4) or "").strip()
        ev = _event("sxid", bus_id, int(m.group(3)), ts, rest)
        ev["switch"] = m.group(1)
        ev["severity"] = ("fatal" if rest.startswith("Fatal") else
                          "non_fatal" if rest.startswith("Non-fatal") else None)
        return ev
    m = _PROBE_LOST_RE.search(text)
    if m:
        tail = text[m.end():] + " " + " ".join(following)
        if _FALLEN not in tail:
            return None
        bus_id = normalize_bus_id(m.group(1))
        if bus_id is None:
            return None
        return _event("fallen_off_bus", bus_id, 79, ts,
                      "GPU has fallen off the bus (the driver's probe found it not responding; no Xid record)")
    m = _DEV_RE.search(text.rstrip("\r\n"))
    if m:
        bus_id = normalize_bus_id(m.group(1))
        msg = m.group(2)
        if bus_id is None:
            return None
        if msg.startswith("GPU has fallen off the bus"):
            return _event("fallen_off_bus", bus_id, 79, ts, msg)
        if msg.startswith("RmInitAdapter failed"):
            return _event("rm_init_failed", bus_id, None, ts, msg)
    return None


def parse_xid_events(data, max_lines=MAX_LINES, max_bytes=MAX_BYTES, max_events=MAX_EVENTS):
    """Xid, SXid and other GPU-health records in kernel log text (str or bytes; non-UTF-8
    bytes become U+FFFD).

    Each event is ``{"kind", "bus_id", "xid", "pid", "process", "message", "timestamp",
    "gpu_instance", "compute_instance"}`` (SXid events add ``switch`` and ``severity``).
    ``kind``: ``xid``; ``fallen_off_bus`` (the open driver's message without an Xid record,
    read as Xid 79; dropped where the same GPU has an Xid 79 record in the log); ``rm_init_failed``
    (``RmInitAdapter failed``, no Xid); ``sxid`` (NVSwitch).

    Only the last ``max_bytes`` bytes and ``max_lines`` lines are read (the newest records
    matter most), lines longer than ``MAX_LINE`` characters are cut, at most ``max_events``
    events are kept (the newest). Returns ``(events, stats)``; ``stats`` says what was cut:
    ``{"lines", "truncated_bytes", "truncated_lines", "long_lines", "dropped_events"}``.
    """
    stats = {"lines": 0, "truncated_bytes": 0, "truncated_lines": 0, "long_lines": 0,
             "dropped_events": 0}
    if isinstance(data, bytes) and len(data) > max_bytes:
        stats["truncated_bytes"] = len(data) - max_bytes
        data = data[-max_bytes:]
    text = _as_text(data)
    if len(text) > max_bytes:
        stats["truncated_bytes"] += len(text) - max_bytes
        text = text[-max_bytes:]
    lines = text.split("\n")
    if len(lines) > max_lines:
        stats["truncated_lines"] = len(lines) - max_lines
        lines = lines[-max_lines:]
    events = []
    for i, line in enumerate(lines):
        if not line:
            continue
        stats["lines"] += 1
        if len(line) > MAX_LINE:
            stats["long_lines"] += 1
            line = line[:MAX_LINE]
        # journald exports a non-UTF-8 MESSAGE as a byte array: only those are decoded first.
        if not any(mark in line for mark in _MARKERS) and \
                not (line.startswith("{") and _JSON_BYTES_RE.search(line)):
            continue
        record, ts = _split_record(line)
        if record is None:
            continue
        following = ()
        if "NVRM: The NVIDIA GPU" in record:
            following = [ln[:MAX_LINE] for ln in lines[i + 1:i + _PROBE_LOOKAHEAD]]
        ev = _parse_text(record, ts, following)
        if ev is not None:
            events.append(ev)
    events = _drop_duplicate_79(events)
    if len(events) > max_events:
        stats["dropped_events"] = len(events) - max_events
        events = events[-max_events:]
    return events, stats


def _drop_duplicate_79(events):
    """A GPU's fallen-off-the-bus message beside its Xid 79 record is the same event: only
    GPUs without an Xid 79 record keep it (as their Xid 79)."""
    with_79 = set(e["bus_id"] for e in events if e["kind"] == "xid" and e["xid"] == 79)
    return [e for e in events if not (e["kind"] == "fallen_off_bus" and e["bus_id"] in with_79)]


_RM_INIT = {"mnemonic": "RmInitAdapter failed", "bucket": "RESET_GPU", "action": "reset_gpu",
            "meaning": "the driver could not initialise the GPU (read as NVIDIA's Xid 143, "
                       "GPU_INIT_ERROR: RESET_GPU)"}


def _mig_key(ev):
    if ev["gpu_instance"] is None:
        return None
    if ev["compute_instance"] is None:
        return "GI %d" % ev["gpu_instance"]
    return "GI %d CI %d" % (ev["gpu_instance"], ev["compute_instance"])


def aggregate(events, resets=None):
    """Per-GPU summary ``{bus_id: {"bus_id", "counts", "total", "last", "action",
    "action_xids", "action_events", "classes", "kernel_events", "mig", "recovery_action",
    "before_reset"}}``.

    ``counts``: per Xid (string keys; a fallen-off-the-bus message without its Xid counts as
    79); ``kernel_events``: records without an Xid number (``fallen_off_bus``,
    ``rm_init_failed``); ``mig``: Xids the driver attributed to a MIG instance, per instance
    (``GI 5`` / ``GI 5 CI 0``); ``recovery_action``: the action the newest Xid 154 names (the
    driver's verdict in the log: it replaces what earlier 154s said); ``action``: the most
    severe action, ``action_xids`` / ``action_events`` what calls for it.

    ``resets``: ``{bus_id: seconds since boot}`` of GPU resets done on this boot: events of
    that GPU logged before it are counted in ``before_reset`` and call for nothing (the reset
    cleared them). SXid events are left out (see :func:`aggregate_sxids`).
    """
    resets = resets or {}
    out = {}
    for ev in events:
        if ev.get("kind") == "sxid":
            continue
        gpu = out.setdefault(ev["bus_id"], {
            "bus_id": ev["bus_id"], "counts": {}, "total": 0, "last": None, "action": "none",
            "action_xids": [], "action_events": [], "classes": {}, "kernel_events": {},
            "mig": {}, "recovery_action": None, "before_reset": 0})
        reset_at = resets.get(ev["bus_id"])
        if reset_at is not None and ev["timestamp"] is not None and ev["timestamp"] <= reset_at:
            gpu["before_reset"] += 1
            continue
        kind = ev.get("kind", "xid")
        gpu["total"] += 1
        gpu["last"] = {"xid": ev["xid"], "kind": kind, "message": ev["message"],
                       "timestamp": ev["timestamp"], "pid": ev["pid"], "process": ev["process"],
                       "gpu_instance": ev.get("gpu_instance"),
                       "compute_instance": ev.get("compute_instance")}
        if kind != "xid":
            gpu["kernel_events"][kind] = gpu["kernel_events"].get(kind, 0) + 1
        if kind == "rm_init_failed":
            cls = dict(_RM_INIT, xid=None)
            _raise(gpu, cls["action"], event="rm_init_failed")
            continue
        key = str(ev["xid"])
        gpu["counts"][key] = gpu["counts"].get(key, 0) + 1
        mig = _mig_key(ev)
        if mig:
            inst = gpu["mig"].setdefault(mig, {"gpu_instance": ev["gpu_instance"],
                                               "compute_instance": ev["compute_instance"],
                                               "counts": {}})
            inst["counts"][key] = inst["counts"].get(key, 0) + 1
        cls = classify(ev["xid"], ev["message"])
        prev = gpu["classes"].get(key, {}).get("action", "none")
        gpu["classes"][key] = {"mnemonic": cls["mnemonic"], "bucket": cls["bucket"],
                               "action": worse(cls["action"], prev), "meaning": cls["meaning"],
                               "known": cls["known"]}
        if cls["bucket"] == XID_154:
            # A state change: the newest one is the driver's current verdict.
            gpu["recovery_action"] = cls["action"]
            continue
        _raise(gpu, cls["action"], xid=ev["xid"])
    for gpu in out.values():
        if gpu["recovery_action"] is not None:
            _raise(gpu, gpu["recovery_action"], xid=154)
    return out


def _raise(gpu, action, xid=None, event=None):
    if rank(action) > rank(gpu["action"]):
        gpu["action"] = action
        gpu["action_xids"], gpu["action_events"] = [], []
    if action == gpu["action"]:
        if xid is not None and xid not in gpu["action_xids"]:
            gpu["action_xids"].append(xid)
        if event is not None and event not in gpu["action_events"]:
            gpu["action_events"].append(event)


def worst_action(per_gpu):
    action = "none"
    for gpu in per_gpu.values():
        action = worse(gpu["action"], action)
    return action


# NVIDIA Fabric Manager user guide ("NVSwitch SXid errors"): a non-fatal SXid needs no recovery;
# a fatal one stops the fabric on that switch and needs the NVSwitches and GPUs reset together,
# which this collection does by rebooting the drained node.
SXID_ACTIONS = {"fatal": "reboot", "non_fatal": "ignore", None: "unknown"}


def aggregate_sxids(events):
    """Per-NVSwitch summary ``{bus_id: {"bus_id", "switch", "counts", "fatal", "non_fatal",
    "last", "action"}}`` of SXid events. A record's first line states its severity ("Fatal," /
    "Non-fatal,") and is what ``counts`` counts; an SXid only seen on continuation lines (its
    first line cut off) counts those and is ``unknown``."""
    out, heads, conts, severity = {}, {}, {}, {}
    for ev in events:
        if ev.get("kind") != "sxid":
            continue
        sw = out.setdefault(ev["bus_id"], {"bus_id": ev["bus_id"], "switch": ev.get("switch"),
                                           "counts": {}, "fatal": [], "non_fatal": [],
                                           "last": None, "action": "none"})
        key = (ev["bus_id"], str(ev["xid"]))
        sev = ev.get("severity")
        if sev is None:
            conts[key] = conts.get(key, 0) + 1
            continue
        heads[key] = heads.get(key, 0) + 1
        if sev == "fatal" or severity.get(key) is None:
            severity[key] = sev
        sw["last"] = {"sxid": ev["xid"], "severity": sev, "message": ev["message"],
                      "timestamp": ev["timestamp"]}
    for key in set(heads) | set(conts):
        bus_id, sxid = key
        sw = out[bus_id]
        sw["counts"][sxid] = heads.get(key) or conts.get(key, 0)
        sev = severity.get(key)
        if sev is not None:
            sw[sev].append(int(sxid))
        sw["action"] = worse(SXID_ACTIONS[sev], sw["action"])
    for sw in out.values():
        sw["fatal"].sort()
        sw["non_fatal"].sort()
    return out


# --------------------------------------------------------------------------- reading

# First field of a /dev/kmsg record: "<prio>,<seq>,...": the kernel numbers records from 0 at boot.
_KMSG_SEQ_RE = re.compile(br"^\d{1,3},(\d{1,20}),")


def _size(n):
    if n < 1024:
        return "%d bytes" % n
    if n < 1 << 20:
        return "%.1f KiB" % (n / 1024.0)
    return "%.1f MiB" % (n / float(1 << 20))


def _log(data, source, attempts, notes=None, dropped=0):
    return {"data": data, "source": source, "attempts": attempts, "notes": list(notes or []),
            "dropped_bytes": dropped}


def read_kernel_log(timeout=10.0, limit=MAX_BYTES, journalctl="journalctl", kmsg="/dev/kmsg",
                    dmesg="dmesg", max_lines=MAX_LINES):
    """The newest kernel log of this boot, oldest line first, from the first source that answers.

    Returns ``{"data", "source", "attempts", "notes", "dropped_bytes"}``: ``data`` (bytes, None
    when no source worked) from ``source`` (``journal``, ``kmsg`` or ``dmesg``); ``attempts``
    lists ``{"source", "error"}`` for the sources that failed before it; ``notes`` says what of
    this boot's log was not read (empty when all of it was) and ``dropped_bytes`` how many older
    bytes were cut (at least: an unknown amount is only in ``notes``).

    Each source is bounded by ``timeout`` seconds (commands are killed with their descendants)
    and ``limit`` bytes, and on overflow keeps the newest ``limit`` bytes - the newest records
    are the ones that matter:

    * ``journalctl -k -b -r -n max_lines`` prints the newest record first: it is stopped once
      ``limit`` bytes are in (or at the deadline, keeping what it printed) and its lines are put
      back in time order. An empty answer is a failure (journald does not collect the kernel's
      messages here: a container, ``ReadKMsg=no``).
    * ``kmsg`` (``/dev/kmsg``, a character device read without blocking until it has no more
      records; or a file) keeps its last ``limit`` bytes. Its records are numbered from 0 at
      boot: a first record numbered N means the kernel ring buffer had already overwritten N.
    * ``dmesg`` runs to its end and its last ``limit`` bytes are kept.

    Any of the three can be set to None to skip it.
    """
    timeout = safe_io.check_timeout(timeout, "timeout", minimum=0.1, maximum=600)
    attempts = []
    for source, path, read, extra in (("journal", journalctl, _read_journal, (max_lines,)),
                                      ("kmsg", kmsg, _read_kmsg, ()),
                                      ("dmesg", dmesg, _read_dmesg, ())):
        if not path:
            continue
        got = read(path, timeout, limit, *extra)
        if isinstance(got, dict):
            got["attempts"] = attempts
            return got
        attempts.append({"source": source, "error": got})
    return _log(None, None, attempts)


def _read_journal(journalctl, timeout, limit, max_lines):
    """The journal's newest kernel records in time order (a :func:`_log` dict), or a reason."""
    argv = [journalctl, "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic", "-r",
            "-n", str(int(max_lines))]
    notes = []
    try:
        res = safe_io.run_command(argv, timeout, limit=limit, keep="head")
    except safe_io.CommandTimeout as e:
        if e.result is None or not e.result.stdout.strip():
            return str(e)
        # Newest first: what it printed before the deadline is the newest part of the log.
        res = e.result
        notes.append("journalctl did not finish within %gs: only the newest %s it printed were "
                     "scanned" % (timeout, _size(len(res.stdout))))
    except safe_io.UnsafeInput as e:
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (journalctl, e.strerror or e)
    if res.rc not in (0, None) and not res.truncated:
        return _exit_reason(journalctl, res)
    if not res.stdout.strip():
        # A booted kernel always logs something: an empty answer means journald does not
        # collect kernel messages here (a container, ReadKMsg=no), not a quiet kernel.
        return "the journal holds no kernel messages for this boot"
    lines = res.stdout.rstrip(b"\n").split(b"\n")
    if res.truncated and not notes:
        notes.append("this boot's kernel messages in the journal exceed %s: only the newest %s "
                     "were scanned" % (_size(limit), _size(len(res.stdout))))
    if len(lines) >= max_lines:
        notes.append("journalctl -n %d: only the newest %d records were read" % (max_lines, max_lines))
    lines.reverse()
    return _log(b"\n".join(lines) + b"\n", "journal", None, notes)


def _read_kmsg(kmsg, timeout, limit):
    """The kernel ring buffer's newest ``limit`` bytes (a :func:`_log` dict), or a reason."""
    try:
        tail = safe_io.read_tail(kmsg, limit=limit, timeout=timeout, allow_char_device=True)
    except safe_io.UnsafeInput as e:
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (kmsg, e.strerror or e)
    if not tail.data.strip():
        return "%s holds no kernel records" % kmsg
    notes = []
    if tail.dropped:
        notes.append("%s holds more than %s: the oldest %s were not scanned"
                     % (kmsg, _size(limit), _size(tail.dropped)))
    if tail.overwritten:
        notes.append("the kernel overwrote records of %s while it was read (%d times)"
                     % (kmsg, tail.overwritten))
    m = _KMSG_SEQ_RE.match(tail.data)
    if m and not tail.dropped and int(m.group(1)) > 0:
        notes.append("the kernel ring buffer no longer holds the first %d records of this boot"
                     % int(m.group(1)))
    return _log(tail.data, "kmsg", None, notes, tail.dropped)


def _read_dmesg(dmesg, timeout, limit):
    """``dmesg``'s newest ``limit`` bytes (a :func:`_log` dict), or a reason."""
    try:
        res = safe_io.run_command([dmesg], timeout, limit=limit, keep="tail")
    except safe_io.UnsafeInput as e:  # includes CommandTimeout: its output is the oldest part
        return str(e)
    except (IOError, OSError) as e:
        return "%s: %s" % (dmesg, e.strerror or e)
    if res.rc != 0:
        return _exit_reason(dmesg, res)
    if not res.stdout.strip():
        return "%s printed no kernel records" % dmesg
    notes = []
    if res.truncated:
        notes.append("dmesg printed more than %s: the oldest %s were not scanned"
                     % (_size(limit), _size(res.dropped)))
    return _log(res.stdout, "dmesg", None, notes, res.dropped)


def _exit_reason(argv0, res):
    err = res.text("stderr").strip().splitlines()
    return "%s exited %d%s" % (argv0, res.rc, (": " + err[-1][:200]) if err else "")


def scan_warning(log, stats=None):
    """The warning for a kernel log scan that did not cover this boot's whole log, or None.

    ``log`` is :func:`read_kernel_log`'s dict, ``stats`` :func:`parse_xid_events`'s."""
    if log["data"] is None:
        if not log["attempts"]:
            return "no kernel log source is enabled: Xid errors cannot be ruled out"
        return "no kernel log could be read (%s): Xid errors cannot be ruled out" % ", ".join(
            "%s: %s" % (a["source"], a["error"]) for a in log["attempts"])
    notes = list(log["notes"])
    stats = stats or {}
    if stats.get("truncated_bytes"):
        notes.append("the oldest %s read were not scanned" % _size(stats["truncated_bytes"]))
    if stats.get("truncated_lines"):
        notes.append("only the newest %d lines were scanned (%d older lines were not)"
                     % (stats["lines"], stats["truncated_lines"]))
    if not notes:
        return None
    return "kernel log truncated (%s): %s; Xid errors in the part not scanned cannot be ruled out" % (
        log["source"], "; ".join(notes))


def xid_report(timeout=10.0, limit=MAX_BYTES, resets=None, **sources):
    """Read, parse and aggregate: the node's Xid facts in one dict.

    ``{"source", "attempts", "stats", "gpus": {bus_id: ...}, "nvswitches": {bus_id: ...},
    "action", "sxid_action", "events", "scanned", "truncated", "dropped_bytes", "warning"}``
    (``events`` is the count). ``source`` None and ``scanned`` false mean no kernel log could
    be read (``attempts`` says why); ``truncated`` means the oldest part of this boot's log was
    not scanned (``dropped_bytes``: at least that many bytes). ``warning`` says either in words,
    None when the whole log was scanned: no Xid found is then "none in the log", not "none in
    the part that could be read". ``resets``: see :func:`aggregate`.
    """
    log = read_kernel_log(timeout=timeout, limit=limit, **sources)
    if log["data"] is None:
        return {"source": None, "attempts": log["attempts"], "stats": None, "gpus": {},
                "nvswitches": {}, "action": "none", "sxid_action": "none", "events": 0,
                "scanned": False, "truncated": False, "dropped_bytes": 0,
                "warning": scan_warning(log)}
    events, stats = parse_xid_events(log["data"], max_bytes=limit)
    per_gpu = aggregate(events, resets)
    switches = aggregate_sxids(events)
    warning = scan_warning(log, stats)
    sxid_action = "none"
    for sw in switches.values():
        sxid_action = worse(sw["action"], sxid_action)
    return {"source": log["source"], "attempts": log["attempts"], "stats": stats, "gpus": per_gpu,
            "nvswitches": switches, "action": worst_action(per_gpu), "sxid_action": sxid_action,
            "events": len(events), "scanned": True, "truncated": warning is not None,
            "dropped_bytes": log["dropped_bytes"] + stats["truncated_bytes"], "warning": warning}
