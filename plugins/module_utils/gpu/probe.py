# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a GPU probe in a child process that may hang forever (node side, Python 3.8+).

NVML calls can hang (the R570 regression hangs ``nvmlInit``), and a process stuck in the
driver can sit in uninterruptible sleep where even SIGKILL does not take effect. So the probe
runs in a forked child in its own session whose only link to us is a pipe:

* the child reports progress lines (the call it is about to make) and one final JSON result;
* the parent waits with ``select`` until a deadline, never with a blocking ``read``/``waitpid``;
* on timeout the parent SIGKILLs the child's whole process group (nvidia-smi included), reaps
  it if it dies within a short grace period, and otherwise leaves it behind and reports its
  pid: a frozen or D-state child is never waited for;
* the child's stdin/stdout/stderr are /dev/null and every other inherited descriptor is closed,
  so a stuck child cannot hold Ansible's module output pipe open.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import math
import os
import select
import signal
import time

from ansible_collections.kubegpu.fleet.plugins.module_utils._common import safe_io
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.health import (
    HealthParseError,
    nvml_health,
    parse_health_xml,
    verdict as health_verdict,
)
from ansible_collections.kubegpu.fleet.plugins.module_utils.gpu.smi import (
    NVML_ERROR_NAMES, SmiParseError, error_name, merge_smi, parse_handle_errors, parse_nvlink,
    parse_smi_list, parse_smi_xml, smi_error, virtualization_mode_value)

REAP_GRACE = 0.5  # seconds to wait for a SIGKILLed child before leaving it behind
_READ_CHUNK = 65536
SMI_OUTPUT_LIMIT = 32 << 20  # nvidia-smi -q -x of 16 GPUs with MIG is well under 2 MiB
_PR_SET_CHILD_SUBREAPER = 36


class ChildOutcome(object):
    """What came back from :func:`run_in_child`.

    ``status``: ``ok`` (result received), ``hung`` (deadline passed, child killed),
    ``died`` (pipe closed without a result), ``error`` (could not start the child).
    """

    def __init__(self, status, value=None, stage=None, elapsed=0.0, pid=None, reaped=True,
                 exit_status=None, error=None, leftovers=()):
        self.status = status
        self.leftovers = list(leftovers)
        self.value = value
        self.stage = stage
        self.elapsed = elapsed
        self.pid = pid
        self.reaped = reaped
        self.exit_status = exit_status
        self.error = error


class Emitter(object):
    """Child side of the pipe: progress stages and the final result, one line each."""

    def __init__(self, fd):
        self.fd = fd

    def _write(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def stage(self, text):
        self._write(b"S " + text.replace("\n", " ").encode("utf-8", "replace") + b"\n")

    def result(self, value):
        self._write(b"R " + json.dumps(value, sort_keys=True).encode("utf-8") + b"\n")


def _isolate_child(keep_fd):
    """Own session, /dev/null stdio, no other inherited descriptors, default signals."""
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    keep = (0, 1, 2, keep_fd)
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _describe_wait_status(status):
    if os.WIFSIGNALED(status):
        return "killed by signal %d" % os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return "exited with status %d" % os.WEXITSTATUS(status)
    return "wait status %d" % status


def _try_reap(pid, grace):
    """waitpid(WNOHANG) until reaped or ``grace`` seconds pass. Returns (reaped, exit text)."""
    end = time.monotonic() + grace
    delay = 0.001
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            # ECHILD: somebody else reaped it (e.g. a SIGCHLD handler set to SIG_IGN).
            return True, None
        if got == pid:
            return True, _describe_wait_status(status)
        if time.monotonic() >= end:
            return False, None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def session_members(sid, proc="/proc"):
    """Live (not zombie) processes of session ``sid``, from ``<proc>/<pid>/stat``."""
    return safe_io.live_processes(safe_io.STAT_SESSION, sid, proc)


def children_of(ppid, proc="/proc"):
    """Live (not zombie) children of ``ppid``."""
    return safe_io.live_processes(safe_io.STAT_PPID, ppid, proc)


def become_subreaper():
    """Make this process the child subreaper (Linux 3.4+), so that what a probe daemonises
    (double fork + setsid: out of the probe's session) is reparented here, not to init, and
    can be killed when the probe is over. Returns whether it worked."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def _kill_strays(known, grace):
    """SIGKILL and reap children of this process that are not in ``known`` (descendants of the
    probe reparented here). Returns those that did not die within ``grace`` seconds."""
    strays = [p for p in children_of(os.getpid()) if p not in known]
    for pid in strays:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    left = []
    end = time.monotonic() + grace
    for pid in strays:
        reaped, _status = _try_reap(pid, max(0.0, end - time.monotonic()))
        if not reaped:
            left.append(pid)
    return left


def _wait_session_gone(sid, until):
    """Poll until session ``sid`` has no live process or ``until`` passes; return what is left."""
    while True:
        left = session_members(sid)
        if not left or time.monotonic() >= until:
            return left
        time.sleep(0.02)


def _kill_group(pid):
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except OSError:
            pass


def run_in_child(target, timeout, reap_grace=REAP_GRACE):
    """Run ``target(emitter)`` in a forked child; return a ChildOutcome within about
    ``timeout + reap_grace`` seconds whatever the child does."""
    start = time.monotonic()
    deadline = start + timeout
    # Descendants that leave the probe's session (a daemonising nvidia-smi) come back to us.
    subreaper = become_subreaper()
    known = set(children_of(os.getpid())) if subreaper else None
    try:
        rfd, wfd = os.pipe()
    except OSError as e:
        return ChildOutcome("error", error="cannot create a pipe for the probe: %s" % e)
    try:
        pid = os.fork()
    except OSError as e:
        os.close(rfd)
        os.close(wfd)
        return ChildOutcome("error", error="cannot fork the probe process: %s" % e)

    if pid == 0:  # child: never returns
        code = 0
        try:
            os.close(rfd)
            _isolate_child(wfd)
            emitter = Emitter(wfd)
            try:
                value = {"ok": True, "value": target(emitter)}
            except Exception as e:  # report, never let a traceback escape the child
                value = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            emitter.result(value)
        except BaseException:
            code = 70
        finally:
            os._exit(code)

    os.close(wfd)
    buf = b""
    stage = None
    result = None
    eof = False
    try:
        while not eof:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready = select.select([rfd], [], [], remaining)[0]  # retries EINTR (PEP 475)
            if not ready:
                continue
            chunk = os.read(rfd, _READ_CHUNK)
            if not chunk:
                eof = True
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.startswith(b"S "):
                    stage = line[2:].decode("utf-8", "replace")
                elif line.startswith(b"R "):
                    try:
                        result = json.loads(line[2:].decode("utf-8"))
                    except ValueError:
                        result = {"ok": False, "error": "probe sent an unreadable result"}
    except BaseException:
        # Interrupted (KeyboardInterrupt, a signal handler raising): do not leave it running.
        _kill_group(pid)
        _try_reap(pid, reap_grace)
        raise
    finally:
        os.close(rfd)

    if known is not None:
        known.add(pid)
    if result is not None or eof:
        reaped, exit_status = _try_reap(pid, reap_grace)
        if not reaped:
            _kill_group(pid)
            reaped, exit_status = _try_reap(pid, reap_grace)
        strays = _kill_strays(known, reap_grace) if known is not None else []
        elapsed = time.monotonic() - start
        if result is None:
            return ChildOutcome("died", stage=stage, elapsed=elapsed, pid=pid, reaped=reaped,
                                exit_status=exit_status, leftovers=strays)
        return ChildOutcome("ok", value=result, stage=stage, elapsed=elapsed, pid=pid,
                            reaped=reaped, exit_status=exit_status, leftovers=strays)

    # Deadline passed: kill the child's whole session (nvidia-smi included). A process frozen
    # or in uninterruptible sleep ignores SIGKILL: it is left behind and reported, never waited on.
    _kill_group(pid)
    grace_end = time.monotonic() + reap_grace
    reaped, exit_status = _try_reap(pid, reap_grace)
    leftovers = _wait_session_gone(pid, grace_end)
    if known is not None and reaped:
        # The probe is gone: whatever it started in another session is now our child.
        leftovers = sorted(set(leftovers) | set(_kill_strays(known, reap_grace)))
    return ChildOutcome("hung", stage=stage, elapsed=time.monotonic() - start, pid=pid,
                        reaped=reaped, exit_status=exit_status, leftovers=leftovers)


# ---------------------------------------------------------------------------- NVML probe

def _nvml_error(pynvml, exc, function, **where):
    code = getattr(exc, "value", None)
    name = NVML_ERROR_NAMES.get(code) if isinstance(code, int) else None
    if name is None and isinstance(code, int):
        for attr in dir(pynvml):
            if attr.startswith("NVML_ERROR_") and getattr(pynvml, attr) == code:
                name = attr
                break
    try:
        message = str(exc)
    except Exception:  # str() asks the library for the error string
        message = repr(exc)
    err = {"function": function, "code": name, "message": message}
    err.update(where)
    return err


class _Failed(object):
    pass


FAILED = _Failed()


def mig_profile_from_name(name):
    """``NVIDIA A100-SXM4-40GB MIG 1g.5gb`` -> ``1g.5gb`` (None when the name has no profile)."""
    if name and " MIG " in name:
        return name.rsplit(" MIG ", 1)[1].strip() or None
    return None


def mig_profile_from_attributes(gi_slices, ci_slices, memory_mb, parent_memory_bytes):
    """Profile name from MIG device attributes, the way NVIDIA's device plugin names them.

    Memory is expressed as the device's share of the parent's memory rounded up to eighths,
    times the parent's memory in whole GB: 9984 MiB of an 80 GB H100 -> 10gb.
    """
    if not gi_slices or not memory_mb or not parent_memory_bytes:
        return None
    one_gb = 1024 * 1024 * 1024
    frac = (float(memory_mb) * 1024 * 1024) / float(parent_memory_bytes)
    frac = math.ceil(frac * 8) / 8.0
    total_gb = (parent_memory_bytes + one_gb - 1) // one_gb
    gb = int(round(frac * total_gb))
    if ci_slices and ci_slices < gi_slices:
        return "%dc.%dg.%dgb" % (ci_slices, gi_slices, gb)
    return "%dg.%dgb" % (gi_slices, gb)


def _mode(value):
    if value is None:
        return "unknown"
    return "enabled" if value == 1 else "disabled"


def nvml_probe(emit, library_path=None):
    """Child-side NVML walk: one pass over system, GPUs and MIG devices (real pynvml)."""
    import ctypes
    import pynvml  # pylint: disable=import-error

    errors = []

    def call(function, fn, *args, **where):
        emit.stage("%s%s" % (function, "".join(" %s=%s" % kv for kv in sorted(where.items()))))
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            errors.append(_nvml_error(pynvml, e, function, **where))
        except Exception as e:  # e.g. NVMLLibraryMismatchError for a missing symbol
            errors.append({"function": function, "code": None,
                           "message": "%s: %s" % (type(e).__name__, e)})
        return FAILED

    if library_path:
        emit.stage("dlopen %s" % library_path)
        try:
            pynvml.nvmlLib = ctypes.CDLL(library_path)
        except OSError as e:
            return {"init_error": {"function": "dlopen", "code": "NVML_ERROR_LIBRARY_NOT_FOUND",
                                   "message": str(e)}}
    emit.stage("nvmlInit")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        return {"init_error": _nvml_error(pynvml, e, "nvmlInit")}

    out = {"driver_version": None, "cuda_driver_version": None, "nvml_version": None, "gpus": []}
    v = call("nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion)
    if v is not FAILED:
        out["driver_version"] = v
    v = call("nvmlSystemGetCudaDriverVersion", pynvml.nvmlSystemGetCudaDriverVersion)
    if v is not FAILED and v:
        out["cuda_driver_version"] = "%d.%d" % (v // 1000, (v % 1000) // 10)
    v = call("nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion)
    if v is not FAILED:
        out["nvml_version"] = v
    count = call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
    if count is FAILED:
        count = 0

    for i in range(count):
        gpu_errors_start = len(errors)
        gpu = {"index": i, "uuid": None, "name": None, "minor_number": None, "pci_bus_id": None,
               "memory_total_mib": None, "mig_mode": {"current": "unknown", "pending": "unknown"},
               "mig_devices": [], "virtualization_mode": "unknown", "errors": []}
        out["gpus"].append(gpu)
        h = call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, i, gpu=i)
        if h is FAILED:
            gpu["errors"] = errors[gpu_errors_start:]
            continue
        for key, function, fn in (
                ("uuid", "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID),
                ("name", "nvmlDeviceGetName", pynvml.nvmlDeviceGetName),
                ("minor_number", "nvmlDeviceGetMinorNumber", pynvml.nvmlDeviceGetMinorNumber)):
            v = call(function, fn, h, gpu=i)
            if v is not FAILED:
                gpu[key] = v
        v = call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, h, gpu=i)
        if v is not FAILED:
            bus = v.busId
            gpu["pci_bus_id"] = bus.decode("ascii", "replace") if isinstance(bus, bytes) else bus
        parent_mem = None
        v = call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, h, gpu=i)
        if v is not FAILED:
            parent_mem = v.total
            gpu["memory_total_mib"] = v.total // (1024 * 1024)

        # Virtualization mode (VGPU: a vGPU guest). NOT_SUPPORTED and a library without the
        # function (FUNCTION_NOT_FOUND) leave it unknown without an error.
        emit.stage("nvmlDeviceGetVirtualizationMode gpu=%d" % i)
        gpu["virtualization_mode"] = "unknown"
        try:
            gpu["virtualization_mode"] = virtualization_mode_value(int(pynvml.nvmlDeviceGetVirtualizationMode(h)))
        except pynvml.NVMLError as e:
            if getattr(e, "value", None) not in (pynvml.NVML_ERROR_NOT_SUPPORTED,
                                                 getattr(pynvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)):
                errors.append(_nvml_error(pynvml, e, "nvmlDeviceGetVirtualizationMode", gpu=i))
        except AttributeError:
            pass  # a pynvml without the binding
        # MIG mode: NOT_SUPPORTED means the GPU cannot do MIG, not that the probe failed.
        emit.stage("nvmlDeviceGetMigMode gpu=%d" % i)
        try:
            cur, pend = pynvml.nvmlDeviceGetMigMode(h)
            gpu["mig_mode"] = {"current": _mode(cur), "pending": _mode(pend)}
        except pynvml.NVMLError as e:
            if getattr(e, "value", None) == pynvml.NVML_ERROR_NOT_SUPPORTED:
                gpu["mig_mode"] = {"current": "unsupported", "pending": "unsupported"}
            else:
                errors.append(_nvml_error(pynvml, e, "nvmlDeviceGetMigMode", gpu=i))
        if gpu["mig_mode"]["current"] == "enabled":
            _probe_migs(pynvml, call, errors, gpu, h, i, parent_mem)
        # Memory / NVLink health: every query separate, "not supported" is no failure; its
        # errors stay in health["errors"] (they do not make the device list untrustworthy).
        emit.stage("health gpu=%d" % i)
        try:
            gpu["health"] = nvml_health(pynvml, h)
        except Exception as e:  # pylint: disable=broad-except
            gpu["health"] = {"remapped_rows": None, "retired_pages": None, "ecc": None,
                             "nvlink": None, "errors": {"health": "%s: %s" % (type(e).__name__, e)}}
        gpu["health_verdict"] = health_verdict(gpu["health"])
        gpu["errors"] = errors[gpu_errors_start:]

    emit.stage("nvmlShutdown")
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass
    out["errors"] = errors
    return out


def _probe_migs(pynvml, call, errors, gpu, h, i, parent_mem):
    count = call("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, h, gpu=i)
    if count is FAILED:
        return
    for j in range(count):
        # NOT_FOUND marks an empty slot: the normal end of the list, not an error.
        try:
            m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except pynvml.NVMLError as e:
            if getattr(e, "value", None) != pynvml.NVML_ERROR_NOT_FOUND:
                errors.append(_nvml_error(pynvml, e, "nvmlDeviceGetMigDeviceHandleByIndex", gpu=i,
                                          mig_device=j))
            continue
        mig = {"index": j, "uuid": None, "name": None, "profile": None, "gpu_instance_id": None,
               "compute_instance_id": None, "memory_total_mib": None, "multiprocessor_count": None}
        for key, function, fn in (
                ("uuid", "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID),
                ("name", "nvmlDeviceGetName", pynvml.nvmlDeviceGetName),
                ("gpu_instance_id", "nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId),
                ("compute_instance_id", "nvmlDeviceGetComputeInstanceId",
                 pynvml.nvmlDeviceGetComputeInstanceId)):
            v = call(function, fn, m, gpu=i, mig_device=j)
            if v is not FAILED:
                mig[key] = v
        attrs = call("nvmlDeviceGetAttributes", pynvml.nvmlDeviceGetAttributes, m, gpu=i, mig_device=j)
        if attrs is not FAILED:
            mig["memory_total_mib"] = int(attrs.memorySizeMB)
            mig["multiprocessor_count"] = int(attrs.multiprocessorCount)
        mig["profile"] = mig_profile_from_name(mig["name"])
        if mig["profile"] is None and attrs is not FAILED:
            mig["profile"] = mig_profile_from_attributes(
                attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount, attrs.memorySizeMB,
                parent_mem)
        gpu["mig_devices"].append(mig)


# ---------------------------------------------------------------------- nvidia-smi probe

def _run_smi(emit, smi_path, args, env, timeout=None):
    """Run nvidia-smi through safe_io.run_command: bounded output, a deadline, and whatever it
    daemonises killed when it exits. The deadline is a backstop (``timeout`` + 5 s): the
    parent's deadline in run_in_child comes first and reports the probe as hung."""
    emit.stage("%s %s" % (smi_path, " ".join(args)))
    res = safe_io.run_command([smi_path] + list(args), (timeout or 60.0) + 5.0,
                              limit=SMI_OUTPUT_LIMIT, env=env)
    return res.rc, res.text("stdout"), res.text("stderr")


def smi_probe(emit, smi_path, env=None, timeout=None):
    """Child-side ``nvidia-smi -q -x`` (+ ``-L`` when MIG devices exist, for their UUIDs)."""
    try:
        rc, out, err = _run_smi(emit, smi_path, ["-q", "-x"], env, timeout)
    except safe_io.UnsafeInput as e:
        return {"init_error": {"function": "nvidia-smi -q -x", "code": None, "message": str(e)}}
    except OSError as e:
        return {"init_error": {"function": "exec", "code": None,
                               "message": "cannot run %s: %s" % (smi_path, e)}}
    if "<nvidia_smi_log" not in out:
        fail = smi_error(rc, out + "\n" + err)
        fail["function"] = "nvidia-smi -q -x"
        return {"init_error": fail}
    try:
        facts = parse_smi_xml(out)
    except SmiParseError as e:
        return {"init_error": {"function": "nvidia-smi -q -x", "code": None, "message": str(e)}}
    errors = []
    handle_errors = parse_handle_errors(err + "\n" + out)
    if rc != 0:
        fail = smi_error(rc, err or out)
        fail["function"] = "nvidia-smi -q -x"
        errors.append(fail)
    listing = []
    if any(g["mig_devices"] for g in facts["gpus"]):
        try:
            lrc, lout, lerr = _run_smi(emit, smi_path, ["-L"], env, timeout)
            listing = parse_smi_list(lout)
            if lrc != 0 and rc == 0:
                fail = smi_error(lrc, lerr or lout)
                fail["function"] = "nvidia-smi -L"
                errors.append(fail)
        except (safe_io.UnsafeInput, OSError) as e:
            errors.append({"function": "nvidia-smi -L", "code": None, "message": str(e)})
    gpus = merge_smi(facts, listing, handle_errors)
    nvlink, nvlink_error = _smi_nvlink(emit, smi_path, env, timeout)
    warnings = _attach_smi_health(out, gpus, nvlink, nvlink_error)
    for gpu in gpus:
        for e in gpu["errors"]:
            e["gpu"] = gpu["index"]
    per_gpu = [e for g in gpus for e in g["errors"]]
    # The exit status already names the first failure; per-GPU entries say where it happened.
    if per_gpu and errors and errors[0]["code"] == per_gpu[0]["code"]:
        errors = errors[1:]
    return {"driver_version": facts["driver_version"],
            "cuda_driver_version": facts["cuda_driver_version"], "nvml_version": None,
            "gpus": gpus, "errors": per_gpu + errors, "warnings": warnings}


def _smi_nvlink(emit, smi_path, env, timeout):
    """``({uuid: nvlink}, error or None)`` from ``nvidia-smi nvlink -s`` and ``-e``. A GPU the
    tool cannot open makes it exit non-zero after printing the others: what it printed is kept
    and the failure is the error."""
    texts, error = [], None
    for flag in ("-s", "-e"):
        try:
            rc, out, err = _run_smi(emit, smi_path, ["nvlink", flag], env, timeout)
        except (safe_io.UnsafeInput, OSError) as e:
            return {}, "nvidia-smi nvlink %s: %s" % (flag, e)
        if rc != 0 and error is None:
            error = "nvidia-smi nvlink %s: %s" % (flag, smi_error(rc, err or out)["message"])
        texts.append(out)
    return parse_nvlink(texts[0], texts[1]), error


def _attach_smi_health(xml_text, gpus, nvlink=None, nvlink_error=None):
    """Per-GPU ``health`` from the same ``-q -x`` document (matched by UUID, then bus id) and
    NVLink state and counters from ``nvidia-smi nvlink``; returns the document's problems
    (attached_gpus vs <gpu> elements). The verdict is gpu_facts' (facts_run.judge_gpus)."""
    try:
        doc = parse_health_xml(xml_text)
    except HealthParseError as e:
        return ["nvidia-smi health sections not read: %s" % e]
    by_uuid = dict((h["uuid"], h) for h in doc["gpus"] if h.get("uuid"))
    by_bus = dict((h["bus_id"], h) for h in doc["gpus"] if h.get("bus_id"))
    for gpu in gpus:
        h = by_uuid.get(gpu.get("uuid")) or by_bus.get(gpu.get("pci_bus_id"))
        if h is None:
            continue
        health = dict((k, h[k]) for k in ("remapped_rows", "retired_pages", "ecc", "errors", "recovery",
                                          "repair", "pcie", "clocks_event_reasons", "fabric"))
        health["errors"] = dict(health["errors"])
        health["nvlink"] = (nvlink or {}).get(gpu.get("uuid"))
        if nvlink_error and gpu.get("uuid") not in (nvlink or {}):
            health["errors"]["nvlink"] = nvlink_error
        gpu["health"] = health
        gpu["health_verdict"] = health_verdict(health)
    return list(doc["problems"])


__all__ = ["ChildOutcome", "run_in_child", "nvml_probe", "smi_probe", "error_name",
           "mig_profile_from_name", "mig_profile_from_attributes"]
