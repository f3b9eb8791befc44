"""ctypes access to whatever libnvidia-ml.so.1 the node has installed (the fake one in the lab).

Used by the fake device plugin and the fake nvidia-container-runtime-hook so that they share
the library's real failure mechanics: a hung nvmlInit hangs them, a version mismatch fails
them with the library's own error string.
"""
import ctypes

NVML_SUCCESS = 0
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_LIBRARY_NOT_FOUND = 12

_lib = None


class NVMLError(Exception):
    def __init__(self, code, text):
        Exception.__init__(self, text)
        self.code = code


def _load():
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found")
        _lib.nvmlErrorString.restype = ctypes.c_char_p
    return _lib


def _check(rc):
    if rc != NVML_SUCCESS:
        raise NVMLError(rc, _load().nvmlErrorString(rc).decode())


def init():
    _check(_load().nvmlInit_v2())


def shutdown():
    _check(_load().nvmlShutdown())


def driver_version():
    buf = ctypes.create_string_buffer(80)
    _check(_load().nvmlSystemGetDriverVersion(buf, 80))
    return buf.value.decode()


def _handle_by_index(i):
    h = ctypes.c_void_p()
    _check(_load().nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h)))
    return h


def _uuid(h):
    buf = ctypes.create_string_buffer(96)
    _check(_load().nvmlDeviceGetUUID(h, buf, 96))
    return buf.value.decode()


def _uint(fn, h):
    v = ctypes.c_uint()
    _check(getattr(_load(), fn)(h, ctypes.byref(v)))
    return v.value


def devices():
    """[{index, uuid, minor, mig_enabled, mig: [{uuid, gi, ci, profile?}]}] of the node."""
    lib = _load()
    count = ctypes.c_uint()
    _check(lib.nvmlDeviceGetCount_v2(ctypes.byref(count)))
    out = []
    for i in range(count.value):
        h = _handle_by_index(i)
        cur, pend = ctypes.c_uint(), ctypes.c_uint()
        rc = lib.nvmlDeviceGetMigMode(h, ctypes.byref(cur), ctypes.byref(pend))
        mig_enabled = rc == NVML_SUCCESS and cur.value == 1
        dev = {"index": i, "uuid": _uuid(h), "minor": _uint("nvmlDeviceGetMinorNumber", h),
               "mig_enabled": mig_enabled, "mig": []}
        name = ctypes.create_string_buffer(96)
        if lib.nvmlDeviceGetName(h, name, 96) == NVML_SUCCESS:
            dev["name"] = name.value.decode()
        if mig_enabled:
            maxn = _uint("nvmlDeviceGetMaxMigDeviceCount", h)
            for j in range(maxn):
                mh = ctypes.c_void_p()
                rc = lib.nvmlDeviceGetMigDeviceHandleByIndex(h, ctypes.c_uint(j), ctypes.byref(mh))
                if rc == NVML_ERROR_NOT_FOUND:
                    continue
                _check(rc)
                m = {"uuid": _uuid(mh), "gi": _uint("nvmlDeviceGetGpuInstanceId", mh),
                     "ci": _uint("nvmlDeviceGetComputeInstanceId", mh)}
                mname = ctypes.create_string_buffer(96)
                if lib.nvmlDeviceGetName(mh, mname, 96) == NVML_SUCCESS:
                    # "<GPU name> MIG 3g.40gb" -> 3g.40gb
                    m["profile"] = mname.value.decode().rsplit(" ", 1)[-1]
                dev["mig"].append(m)
        out.append(dev)
    return out
