#!/usr/bin/python3
"""A real filesystem that holds shorter names than ext4 and XFS: a FUSE
passthrough of BACKING at MOUNTPOINT whose names are at most NAME_MAX bytes
(statfs says so; a longer name is ENAMETOOLONG, as eCryptfs, some network
and FUSE filesystems answer). Used by tests/names.rs: run as
`short_names.py BACKING MOUNTPOINT NAME_MAX`, in the foreground; unmount
(umount MOUNTPOINT) to end it.
"""

import errno
import os
import sys

import fusepy as fuse


class ShortNames(fuse.Operations):
    # Times in integer nanoseconds, as the filesystem below keeps them.
    use_ns = True

    def __init__(self, backing, name_max):
        self.backing = backing
        self.name_max = name_max

    def _path(self, path):
        for part in path.split("/"):
            if len(part.encode("utf-8", "surrogateescape")) > self.name_max:
                raise fuse.FuseOSError(errno.ENAMETOOLONG)
        return os.path.join(self.backing, path.lstrip("/"))

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        keys = ("st_ino", "st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                "st_atime", "st_mtime", "st_ctime", "st_blocks")
        out = {k: getattr(st, k) for k in keys}
        for k in ("st_atime", "st_mtime", "st_ctime"):
            out[k] = getattr(st, k + "_ns")
        return out

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._path(path))

    def statfs(self, path):
        st = os.statvfs(self._path(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                "f_files", "f_ffree", "f_favail")
        out = {k: getattr(st, k) for k in keys}
        out["f_namemax"] = self.name_max
        return out

    def mkdir(self, path, mode):
        os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        os.rmdir(self._path(path))

    def unlink(self, path):
        os.unlink(self._path(path))

    def rename(self, old, new):
        os.rename(self._path(old), self._path(new))

    def link(self, target, source):
        os.link(self._path(source), self._path(target))

    def symlink(self, target, source):
        os.symlink(source, self._path(target))

    def readlink(self, path):
        return os.readlink(self._path(path))

    def mknod(self, path, mode, dev):
        os.mknod(self._path(path), mode, dev)

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        os.lchown(self._path(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._path(path), ns=times, follow_symlinks=False)

    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._path(path), length)

    def _flags(self, flags):
        return flags & ~(os.O_DIRECT | os.O_NONBLOCK)

    def open(self, path, flags):
        return os.open(self._path(path), self._flags(flags))

    def create(self, path, mode, fi=None):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        return os.open(self._path(path), flags, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        os.fsync(fh)
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0

    def getxattr(self, path, name, position=0):
        try:
            return os.getxattr(self._path(path), name, follow_symlinks=False)
        except OSError as e:
            raise fuse.FuseOSError(e.errno)

    def setxattr(self, path, name, value, options, position=0):
        os.setxattr(self._path(path), name, value, options, follow_symlinks=False)

    def listxattr(self, path):
        return os.listxattr(self._path(path), follow_symlinks=False)

    def removexattr(self, path, name):
        os.removexattr(self._path(path), name, follow_symlinks=False)

    def __call__(self, op, *args):
        try:
            return super().__call__(op, *args)
        except OSError as e:
            if isinstance(e, fuse.FuseOSError):
                raise
            raise fuse.FuseOSError(e.errno or errno.EIO)


if __name__ == "__main__":
    backing, mountpoint, name_max = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fuse.FUSE(ShortNames(backing, name_max), mountpoint, foreground=True,
              allow_other=True, default_permissions=True, use_ino=True,
              nothreads=True)
