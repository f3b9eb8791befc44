"""A complete procfs view with the lab's NVIDIA files: the path lab inventories give as proc_path.

The node's own /proc gets the lab files by bind mounts where the host kernel has the file to
mount over (/proc/devices, /proc/meminfo, /proc/driver; /proc/modules only on kernels built
with module support). Where a file does not exist in the host's procfs it cannot be added, so
the lab also mounts this read-only FUSE view at /run/kubegpu-lab/proc:

* ``devices``, ``modules``, ``meminfo`` and ``driver/`` are the lab's files
  (/run/kubegpu-lab/procfs/...);
* every other name is a symbolic link to the same name under /proc (``1234 -> /proc/1234``,
  ``self -> /proc/self``), listed live from /proc, so per-process paths such as
  ``<view>/<pid>/environ`` or ``<view>/<pid>/root/dev`` resolve in the real procfs with all of
  its semantics (a container's mount namespace included).

Modules given ``proc_path: /run/kubegpu-lab/proc`` therefore see what they would see in /proc
on a real GPU node.
"""
import errno
import os
import stat
import sys
import time

MOUNTPOINT = "/run/kubegpu-lab/proc"
BACKING = "/run/kubegpu-lab/procfs"
LAB_ENTRIES = ("devices", "modules", "meminfo", "driver")


def main(argv):
    try:
        from fusepy import FUSE, FuseOSError, Operations  # Debian's python3-fusepy
    except ImportError:
        from fuse import FUSE, FuseOSError, Operations  # fusepy from PyPI

    class View(Operations):
        def __init__(self):
            self.now = time.time()

        @staticmethod
        def _split(path):
            parts = [p for p in path.split("/") if p]
            return parts

        def _backing(self, parts):
            return os.path.join(BACKING, *parts)

        def getattr(self, path, fh=None):
            parts = self._split(path)
            if not parts:
                return {"st_mode": stat.S_IFDIR | 0o555, "st_nlink": 2, "st_uid": 0, "st_gid": 0,
                        "st_size": 0, "st_atime": self.now, "st_mtime": self.now, "st_ctime": self.now}
            if parts[0] in LAB_ENTRIES:
                try:
                    st = os.lstat(self._backing(parts))
                except OSError as exc:
                    raise FuseOSError(exc.errno)
                return {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                                    "st_atime", "st_mtime", "st_ctime")}
            if len(parts) > 1:
                raise FuseOSError(errno.ENOENT)  # the kernel follows our symlinks itself
            if not os.path.lexists(os.path.join("/proc", parts[0])):
                raise FuseOSError(errno.ENOENT)
            target = "/proc/" + parts[0]
            return {"st_mode": stat.S_IFLNK | 0o777, "st_nlink": 1, "st_uid": 0, "st_gid": 0,
                    "st_size": len(target), "st_atime": self.now, "st_mtime": self.now, "st_ctime": self.now}

        def readlink(self, path):
            parts = self._split(path)
            if len(parts) != 1 or parts[0] in LAB_ENTRIES:
                raise FuseOSError(errno.EINVAL)
            return "/proc/" + parts[0]

        def readdir(self, path, fh):
            parts = self._split(path)
            if not parts:
                names = set(os.listdir("/proc")) | {n for n in LAB_ENTRIES if os.path.lexists(self._backing([n]))}
                return [".", ".."] + sorted(names)
            if parts[0] in LAB_ENTRIES:
                try:
                    return [".", ".."] + sorted(os.listdir(self._backing(parts)))
                except OSError as exc:
                    raise FuseOSError(exc.errno)
            raise FuseOSError(errno.ENOTDIR)

        def open(self, path, flags):
            parts = self._split(path)
            if not parts or parts[0] not in LAB_ENTRIES:
                raise FuseOSError(errno.EACCES)
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EROFS)
            return 0

        def read(self, path, size, offset, fh):
            try:
                with open(self._backing(self._split(path)), "rb") as f:
                    f.seek(offset)
                    return f.read(size)
            except OSError as exc:
                raise FuseOSError(exc.errno)

    os.makedirs(MOUNTPOINT, exist_ok=True)
    FUSE(View(), MOUNTPOINT, foreground=True, ro=True, allow_other=True, nothreads=True,
         attr_timeout=0, entry_timeout=0, negative_timeout=0, fsname="kubegpu-lab-proc",
         direct_io=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
