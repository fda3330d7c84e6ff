"""Run a command inside a throw-away qemu VM that has a Soft-RoCE device.

The host kernel has no RDMA support and modules cannot be loaded, so this
boots Debian's own kernel (``linux-image-amd64``) under qemu (TCG) with the
host's own root filesystem as the guest userspace, mounted read-only over 9p
with a tmpfs overlay on top (guest writes are thrown away).  The guest loads
``rdma_rxe``, creates ``rxe0`` on a dummy interface (and, on request, ``rxe1``
and ``rxe2`` on the two ends of a veth pair) and runs the command in the
caller's working directory with the caller's relevant environment.

Python API::

    from rdma import testvm
    res = testvm.run(["python", "-m", "pytest", "tests/vm"], stream=sys.stdout)
    res.returncode, res.output, res.dmesg, res.console, res.boot_seconds

Command line::

    python -m rdma.testvm [--two-host] [--timeout S] -- CMD [ARGS...]

Inside the guest the command sees these variables (besides the caller's):

=========================  ==================================================
``RDMA_TESTVM``            ``1``
``RDMA_TESTVM_OUT``        a directory whose contents are copied back to the
                           host (``out_dir`` / ``--out``)
``RDMA_TESTVM_DEVICE``     ``rxe0`` (on ``dummy0``, address ``192.0.2.1``)
``RDMA_TESTVM_NETDEV``     ``dummy0``
``RDMA_TESTVM_IP``         ``192.0.2.1``
``RDMA_TESTVM_GID_INDEX``  ``1`` (the IPv4-mapped RoCEv2 GID, on every device)
``RDMA_TESTVM_TWO_HOST``   ``1`` with ``two_host=True``, else ``0``
``RDMA_TESTVM_HOST1_*``    with ``two_host``: ``DEVICE=rxe1 NETDEV=veth0
                           IP=198.51.100.1``
``RDMA_TESTVM_HOST2_*``    with ``two_host``: ``DEVICE=rxe2 NETDEV=veth1
                           IP=198.51.100.2``
=========================  ==================================================

How it works: the xz-compressed bzImage's ELF ``vmlinux`` is extracted once
(PVH boot of the ELF is ~4 s faster under TCG) and cached with a small
initramfs (busybox-static, ``initramfs_init.sh``, ``guest_init.sh`` and the
virtio/9p/overlay/RDMA modules) in ``$RDMA_TESTVM_CACHE`` or
``$XDG_CACHE_HOME/rdma-testvm/<kver>/`` (default ``~/.cache``), written
atomically, keyed by the inputs.  Each run gets a private temp dir whose
``share/`` subdirectory is a second, read-write 9p share: the host writes the
command, its environment and config there, the guest writes back ``ready``,
the live ``output``, ``dmesg`` and ``rc`` (protocol in ``guest_init.sh``).

In the guest, /tmp, /run and /dev/shm are fresh tmpfs and everything else
is the host's tree (writes go to a tmpfs overlay and are lost).  The guest
has no network device to the outside.  ``$RDMA_TESTVM_OUT`` is on an
uncached 9p mount: plain reads/writes are fine, shared writable mmap is not.

Cleanup: qemu runs in its own session and is SIGKILLed on timeout, on any
exception (KeyboardInterrupt included) and, through ``PR_SET_PDEATHSIG``,
when the calling process dies, even by SIGKILL; the temp dir is removed.

Host-side settings: ``RDMA_TESTVM_KERNEL`` (a kernel version under /boot to
use instead of the newest), ``RDMA_TESTVM_CACHE`` (cache directory).

This module must not import anything else from the ``rdma`` package.
"""

from __future__ import annotations

import codecs
import ctypes
import dataclasses
import gzip
import hashlib
import io
import ipaddress
import lzma
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Mapping, Sequence

__all__ = [
    "VMException",
    "VMUnavailable",
    "VMError",
    "VMTimeout",
    "VMResult",
    "Requirements",
    "check_requirements",
    "prepare",
    "run",
    "cache_dir",
    "cache_state",
    "EXIT_TIMEOUT",
    "EXIT_VM_FAILURE",
    "EXIT_UNAVAILABLE",
]

#: CLI exit status when a step timed out (build, boot, command, shutdown).
EXIT_TIMEOUT = 124
#: CLI exit status when the VM failed (setup error, kernel panic, qemu died).
EXIT_VM_FAILURE = 125
#: CLI exit status when the VM cannot be run on this machine at all.
EXIT_UNAVAILABLE = 126

_PKG_DIR = Path(__file__).resolve().parent
_INITRAMFS_INIT = _PKG_DIR / "initramfs_init.sh"
_GUEST_INIT = _PKG_DIR / "guest_init.sh"

#: Bumped whenever the layout of the cached images changes.
_CACHE_FORMAT = "3"

#: Modules insmod'ed by the initramfs, in this order (plus their
#: dependencies from modules.dep); modules built into the kernel are skipped.
#: The RDMA ones are loaded here too (and not with the guest's modprobe):
#: busybox's static insmod is much faster under TCG than the host's kmod.
INITRAMFS_MODULES = (
    "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev",
    "virtio_pci", "netfs", "fscache", "9pnet", "9pnet_virtio", "9p", "overlay",
    # crc32 is what rxe asks the crypto API for when a device is created;
    # preloading it saves a kernel-triggered modprobe.
    "crc32_generic",
    "rdma_rxe", "ib_umad", "rdma_ucm", "dummy", "veth",
)
#: insmod parameters (what the host's /lib/modprobe.d would have given).
_MODULE_PARAMS = {"dummy": "numdummies=0"}
#: Of those, the ones that must exist (as a module or built in).
_REQUIRED_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay",
                     "rdma_rxe", "ib_umad", "rdma_ucm", "dummy", "veth")

# Documentation address ranges only (RFC 5737).
RXE0_ADDR = "192.0.2.1"
HOST1_ADDR = "198.51.100.1"
HOST2_ADDR = "198.51.100.2"
GID_INDEX = 1

_SHARE_TAG = "rdmatestvm"
_GUEST_SHARE = "/run/rdma-testvm"
_KILL_AFTER = 5            # guest: SIGKILL this long after the SIGTERM
_COMMAND_GRACE = 30        # host: extra wait beyond the guest's own timeout
_SHUTDOWN_TIMEOUT = 30     # host: wait for power-off after the command ended
_BUILD_TIMEOUT = 300       # host: building the cached vmlinux/initramfs
_POLL = 0.05

_PASS_ENV = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "HOME", "LANG", "LANGUAGE",
             "TERM", "USER", "LOGNAME", "TZ", "NO_COLOR", "FORCE_COLOR",
             "PY_COLORS", "COLUMNS", "CONDA_PREFIX")
_PASS_ENV_PREFIXES = ("RDMA_", "PYTEST_", "LC_", "PYENV", "PYTHON")

_QEMU = "qemu-system-x86_64"
_KERNEL_APPEND = ("console=ttyS0 panic=-1 loglevel=4 quiet mitigations=off "
                  "pci=noacpi cryptomgr.notests tsc=reliable")


# --------------------------------------------------------------------------
# Exceptions and results
# --------------------------------------------------------------------------

class VMException(Exception):
    """Base class of everything this module raises about the VM."""


class VMUnavailable(VMException):
    """The VM cannot run on this machine (missing package, kernel, ...)."""


class VMError(VMException):
    """The VM failed: guest setup error, kernel panic, qemu died, ...

    ``console`` and ``dmesg`` hold what is known of the guest's logs,
    ``kernel_panic`` tells whether the guest kernel panicked.
    """

    def __init__(self, message: str, *, console: str = "", dmesg: str = "",
                 output: str = "", kernel_panic: bool = False, name: str = ""):
        super().__init__(message)
        self.console = console
        self.dmesg = dmesg
        self.output = output
        self.kernel_panic = kernel_panic
        self.name = name


class VMTimeout(VMException):
    """A step did not finish in time.

    ``step`` is one of ``"build"``, ``"boot"``, ``"command"``;
    ``seconds`` the limit that was exceeded; ``output``/``console``/``dmesg``
    what was collected so far.
    """

    def __init__(self, step: str, seconds: float, message: str = "", *,
                 console: str = "", dmesg: str = "", output: str = "",
                 name: str = ""):
        super().__init__(message or f"{step} timed out after {seconds:g} s")
        self.step = step
        self.seconds = seconds
        self.console = console
        self.dmesg = dmesg
        self.output = output
        self.name = name


@dataclasses.dataclass
class VMResult:
    returncode: int
    output: str
    dmesg: str
    console: str
    #: qemu start until the guest reported RDMA ready (the command starts).
    boot_seconds: float
    #: the whole run() call, including image preparation and shutdown.
    total_seconds: float
    #: the command itself (host-side clock).
    command_seconds: float = 0.0
    #: the unique ``-name`` of the qemu process.
    name: str = ""
    #: where the contents of $RDMA_TESTVM_OUT were copied, if anywhere.
    out_dir: Path | None = None
    #: False if qemu had to be killed after the command finished.
    clean_shutdown: bool = True


@dataclasses.dataclass
class Requirements:
    kernel_version: str
    vmlinuz: Path
    modules_dir: Path
    qemu: str
    busybox: Path


# --------------------------------------------------------------------------
# Requirements
# --------------------------------------------------------------------------

def _version_key(v: str) -> list[tuple[int, int | str]]:
    return [(0, int(p)) if p.isdigit() else (1, p)
            for p in re.split(r"[.\-+~]", v)]


def _find_qemu() -> str:
    path = shutil.which(_QEMU)
    if not path:
        raise VMUnavailable(
            f"{_QEMU} not found on PATH: install the Debian package "
            f"qemu-system-x86")
    return path


def _is_static_elf(path: Path) -> bool:
    """True if *path* is an ELF64 executable without a PT_INTERP header."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if len(hdr) < 64 or hdr[:4] != b"\x7fELF" or hdr[4] != 2:
            return False
        e_phoff, = struct.unpack_from("<Q", hdr, 32)
        e_phentsize, e_phnum = struct.unpack_from("<HH", hdr, 54)
        f.seek(e_phoff)
        ph = f.read(e_phentsize * e_phnum)
    for i in range(e_phnum):
        p_type, = struct.unpack_from("<I", ph, i * e_phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def _find_busybox() -> Path:
    candidates = [Path("/bin/busybox"), Path("/usr/bin/busybox")]
    which = shutil.which("busybox")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        try:
            if c.is_file() and _is_static_elf(c):
                return c
        except OSError:
            continue
    raise VMUnavailable(
        "no statically linked busybox found (/bin/busybox): "
        "install the Debian package busybox-static")


def _parse_modules_dep(moddir: Path) -> dict[str, tuple[str, list[str]]]:
    """module name -> (relative path, [dependency relative paths])."""
    deps: dict[str, tuple[str, list[str]]] = {}
    with open(moddir / "modules.dep") as f:
        for line in f:
            if ":" not in line:
                continue
            path, _, rest = line.partition(":")
            deps[_modname(path)] = (path.strip(), rest.split())
    return deps


def _modname(path: str) -> str:
    base = os.path.basename(path.strip())
    base = re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base)
    return base.replace("-", "_")


def _builtin_modules(moddir: Path) -> set[str]:
    try:
        with open(moddir / "modules.builtin") as f:
            return {_modname(line) for line in f if line.strip()}
    except OSError:
        return set()


def _find_kernel() -> tuple[str, Path, Path]:
    mod_root = Path("/lib/modules")
    boot = Path("/boot")
    wanted = os.environ.get("RDMA_TESTVM_KERNEL")
    kernels = sorted((p.name[len("vmlinuz-"):]
                      for p in boot.glob("vmlinuz-*")),
                     key=_version_key, reverse=True) if boot.is_dir() else []
    if wanted:
        kernels = [k for k in kernels if k == wanted]
        if not kernels:
            raise VMUnavailable(
                f"RDMA_TESTVM_KERNEL={wanted}: no /boot/vmlinuz-{wanted}")
    if not kernels:
        raise VMUnavailable(
            "no kernel image /boot/vmlinuz-*: install the Debian package "
            "linux-image-amd64")
    problems = []
    for kver in kernels:
        moddir = mod_root / kver
        if not (moddir / "modules.dep").is_file():
            problems.append(f"{kver}: no {moddir}/modules.dep")
            continue
        return kver, boot / f"vmlinuz-{kver}", moddir
    raise VMUnavailable(
        "no usable kernel: " + "; ".join(problems)
        + " (reinstall the Debian package linux-image-amd64)")


def check_requirements() -> Requirements:
    """Check that the VM can run here; raise :class:`VMUnavailable` if not."""
    qemu = _find_qemu()
    kver, vmlinuz, moddir = _find_kernel()
    if not os.access(vmlinuz, os.R_OK):
        raise VMUnavailable(f"{vmlinuz} is not readable by this user (Debian "
                            "installs it mode 0600): run as root")
    deps = _parse_modules_dep(moddir)
    builtin = _builtin_modules(moddir)
    missing = [m for m in _REQUIRED_MODULES
               if m not in deps and m not in builtin]
    if missing:
        raise VMUnavailable(
            f"kernel {kver} lacks the modules {', '.join(missing)} "
            f"(in {moddir}); install the Debian package linux-image-amd64")
    for tool, pkg in (("modprobe", "kmod"), ("ip", "iproute2"),
                      ("rdma", "iproute2"), ("timeout", "coreutils"),
                      ("dmesg", "util-linux")):
        if not _which_guest(tool):
            raise VMUnavailable(
                f"'{tool}' (used inside the guest) not found: install the "
                f"Debian package {pkg}")
    busybox = _find_busybox()
    return Requirements(kver, vmlinuz, moddir, qemu, busybox)


def _which_guest(tool: str) -> str | None:
    return shutil.which(tool, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                    "/usr/bin:/sbin:/bin")


# --------------------------------------------------------------------------
# Cached images
# --------------------------------------------------------------------------

def cache_dir(kver: str | None = None) -> Path:
    """The cache directory (per kernel version if *kver* is given)."""
    root = os.environ.get("RDMA_TESTVM_CACHE")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = Path(xdg) if xdg else Path.home() / ".cache"
        base = base / "rdma-testvm"
    return base / kver if kver else base


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"


def _atomic_write(path: Path, chunks: Iterable[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _use_cached(path: Path) -> bool:
    """True if *path* exists; marks it as recently used."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return path.is_file()


def _remove_stale(directory: Path, prefix: str, keep: Path) -> None:
    """Remove cache files of a kind unused for an hour (recently used ones
    may belong to a concurrent run of another version of this module), and
    temp files left by builders that were killed."""
    now = time.time()
    for p in [*directory.glob(prefix + "*"),
              *directory.glob(f".{prefix}*.tmp")]:
        if p == keep:
            continue
        try:
            if now - p.stat().st_mtime > 3600:
                p.unlink()
        except OSError:
            pass


def _has_pvh_note(elf: bytes) -> bool:
    """True if the ELF has the Xen PVH entry note qemu needs to boot it."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        return False
    e_phoff, = struct.unpack_from("<Q", elf, 32)
    e_phentsize, e_phnum = struct.unpack_from("<HH", elf, 54)
    for i in range(e_phnum):
        off = e_phoff + i * e_phentsize
        p_type, = struct.unpack_from("<I", elf, off)
        if p_type != 4:  # PT_NOTE
            continue
        p_offset, = struct.unpack_from("<Q", elf, off + 8)
        p_filesz, = struct.unpack_from("<Q", elf, off + 32)
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12:pos + 12 + namesz]
            if name.rstrip(b"\0") == b"Xen" and ntype == 18:
                return True
            pos += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False


def _extract_vmlinux(data: bytes, deadline: float) -> bytes | None:
    """The uncompressed ELF kernel inside a bzImage, or None."""
    magic = b"\xfd7zXZ\x00"
    start = 0
    while True:
        i = data.find(magic, start)
        if i < 0:
            return None
        dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        out = []
        try:
            for pos in range(i, len(data), 1 << 20):
                if time.monotonic() > deadline:
                    raise VMTimeout("build", _BUILD_TIMEOUT,
                                    "extracting vmlinux took too long")
                out.append(dec.decompress(data[pos:pos + (1 << 20)]))
                if dec.eof:
                    break
        except lzma.LZMAError:
            out = []
        elf = b"".join(out)
        if dec.eof and elf[:4] == b"\x7fELF" and _has_pvh_note(elf):
            return elf
        start = i + 1


def _kernel_image(req: Requirements, cdir: Path, deadline: float) -> Path:
    """The uncompressed vmlinux (cached) if it can be PVH-booted, else the
    bzImage itself (slower to boot)."""
    target = _vmlinux_path(req, cdir)
    none_marker = target.with_name(target.name + ".none")
    if _use_cached(target):
        return target
    if none_marker.is_file():
        return req.vmlinuz
    elf = _extract_vmlinux(req.vmlinuz.read_bytes(), deadline)
    if elf is None:
        _atomic_write(none_marker, [b""])
        return req.vmlinuz
    _atomic_write(target, [elf])
    _remove_stale(cdir, "vmlinux-", target)
    return target


class _Cpio:
    """Minimal writer for the newc cpio format the kernel unpacks."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"",
               rdev: tuple[int, int] = (0, 0)) -> None:
        nameb = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08X}" for v in (
            self.ino, mode, 0, 0, 2 if mode & 0o170000 == 0o040000 else 1,
            0, len(data), 0, 0, rdev[0], rdev[1], len(nameb), 0))
        self.ino += 1
        self.buf.write(hdr.encode() + nameb)
        self.buf.write(b"\0" * (-(110 + len(nameb)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name: str) -> None:
        self._entry(name, 0o040755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, 0o100000 | mode, data)

    def chardev(self, name: str, major: int, minor: int) -> None:
        self._entry(name, 0o020600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        self.buf.write(b"\0" * (-self.buf.tell() % 512))
        return self.buf.getvalue()


def _module_order(moddir: Path) -> list[tuple[str, Path]]:
    deps = _parse_modules_dep(moddir)
    builtin = _builtin_modules(moddir)
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        path, mdeps = deps[name]
        for d in reversed(mdeps):
            visit(_modname(d))
        order.append((name, moddir / path))

    for m in INITRAMFS_MODULES:
        if m in deps:
            visit(m)
        elif m in _REQUIRED_MODULES and m not in builtin:
            raise VMUnavailable(f"kernel module {m} not found in {moddir}")
    return order


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    name = path.name
    if name.endswith(".xz"):
        return lzma.decompress(data)
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith(".zst"):
        zstd = shutil.which("zstd")
        if not zstd:
            raise VMUnavailable(f"{path} is zstd-compressed: install the "
                                "Debian package zstd")
        return subprocess.run([zstd, "-dcq", str(path)], check=True,
                              capture_output=True, timeout=60).stdout
    return data


def _initramfs_path(req: Requirements, cdir: Path,
                    mods: list[tuple[str, Path]]) -> Path:
    h = hashlib.sha256()
    h.update(_CACHE_FORMAT.encode())
    h.update(_INITRAMFS_INIT.read_bytes())
    h.update(_GUEST_INIT.read_bytes())
    h.update(_stat_key(req.busybox).encode())
    for name, path in mods:
        h.update(f"\0{name}\0{_stat_key(path)}\0{_MODULE_PARAMS.get(name)}".encode())
    return cdir / f"initramfs-{h.hexdigest()[:16]}.cpio"


def _vmlinux_path(req: Requirements, cdir: Path) -> Path:
    key = hashlib.sha256(
        f"{_CACHE_FORMAT}\0{_stat_key(req.vmlinuz)}".encode()).hexdigest()[:16]
    return cdir / f"vmlinux-{key}"


def _initramfs(req: Requirements, cdir: Path) -> Path:
    mods = _module_order(req.modules_dir)
    target = _initramfs_path(req, cdir, mods)
    if _use_cached(target):
        return target
    cpio = _Cpio()
    for d in ("bin", "dev", "proc", "sys", "modules", "lower", "upper",
              "newroot"):
        cpio.dir(d)
    cpio.chardev("dev/console", 5, 1)
    cpio.chardev("dev/null", 1, 3)
    cpio.file("bin/busybox", req.busybox.read_bytes(), 0o755)
    cpio.file("init", _INITRAMFS_INIT.read_bytes(), 0o755)
    cpio.file("guest_init.sh", _GUEST_INIT.read_bytes(), 0o755)
    for name, path in mods:
        cpio.file(f"modules/{name}.ko", _read_module(path))
    cpio.file("modules/order", "".join(
        f"{n} {_MODULE_PARAMS.get(n, '')}".rstrip() + "\n"
        for n, _ in mods).encode())
    _atomic_write(target, [cpio.finish()])
    _remove_stale(cdir, "initramfs-", target)
    return target


def prepare(req: Requirements | None = None) -> tuple[Path, Path]:
    """Build (or find in the cache) the kernel image and the initramfs."""
    req = req or check_requirements()
    deadline = time.monotonic() + _BUILD_TIMEOUT
    cdir = cache_dir(req.kernel_version)
    try:
        cdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VMUnavailable(f"cannot create the cache directory {cdir}: {e}")
    kernel = _kernel_image(req, cdir, deadline)
    initrd = _initramfs(req, cdir)
    if time.monotonic() > deadline:
        raise VMTimeout("build", _BUILD_TIMEOUT,
                        "building the VM images took too long")
    return kernel, initrd


def cache_state() -> dict[str, str]:
    """Describe the cache (for ``--check``)."""
    req = check_requirements()
    cdir = cache_dir(req.kernel_version)
    vml = _vmlinux_path(req, cdir)
    initrd = _initramfs_path(req, cdir, _module_order(req.modules_dir))
    if vml.is_file():
        vml_state = f"{vml} (cached)"
    elif vml.with_name(vml.name + ".none").is_file():
        vml_state = (f"{req.vmlinuz} (no PVH-bootable vmlinux inside: "
                     f"slower boot)")
    else:
        vml_state = f"{vml} (not built yet)"
    return {
        "cache_dir": str(cdir),
        "vmlinux": vml_state,
        "initramfs": f"{initrd} "
                     f"({'cached' if initrd.is_file() else 'not built yet'})",
    }


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------

def _mapped_gid(addr: str) -> str:
    """The sysfs spelling of the IPv4-mapped GID of *addr*."""
    raw = ipaddress.IPv6Address("::ffff:" + addr).packed
    return ":".join(raw[i:i + 2].hex() for i in range(0, 16, 2))


def _parse_memory(memory: str | int) -> str:
    if isinstance(memory, int):
        return f"{memory}M"
    m = re.fullmatch(r"\s*(\d+)\s*([MmGg]?)\s*", str(memory))
    if not m:
        raise ValueError(f"bad memory size {memory!r} (use e.g. 1G or 512M)")
    return m.group(1) + (m.group(2).upper() or "M")


def _guest_env(base: Mapping[str, str], extra: Mapping[str, str | None] | None,
               two_host: bool) -> dict[str, str]:
    env: dict[str, str] = {}
    for k, v in base.items():
        if k.startswith("RDMA_TESTVM"):
            continue
        if k in _PASS_ENV or k.startswith(_PASS_ENV_PREFIXES):
            env[k] = v
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin:"
                   "/usr/local/sbin:/usr/sbin:/sbin")
    env.update({
        "RDMA_TESTVM": "1",
        "RDMA_TESTVM_OUT": f"{_GUEST_SHARE}/out",
        "RDMA_TESTVM_DEVICE": "rxe0",
        "RDMA_TESTVM_NETDEV": "dummy0",
        "RDMA_TESTVM_IP": RXE0_ADDR,
        "RDMA_TESTVM_GID_INDEX": str(GID_INDEX),
        "RDMA_TESTVM_TWO_HOST": "1" if two_host else "0",
    })
    if two_host:
        env.update({
            "RDMA_TESTVM_HOST1_DEVICE": "rxe1",
            "RDMA_TESTVM_HOST1_NETDEV": "veth0",
            "RDMA_TESTVM_HOST1_IP": HOST1_ADDR,
            "RDMA_TESTVM_HOST2_DEVICE": "rxe2",
            "RDMA_TESTVM_HOST2_NETDEV": "veth1",
            "RDMA_TESTVM_HOST2_IP": HOST2_ADDR,
        })
    for name, val in (extra or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"bad environment variable name {name!r}")
        if val is None:
            env.pop(name, None)
        else:
            env[name] = str(val)
    return env


def _qemu_opt(path: Path | str) -> str:
    """Escape a value for qemu's comma-separated option syntax."""
    return str(path).replace(",", ",,")


def _under_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def _hidden_in_guest(path: str) -> bool:
    # /tmp is fresh in the guest unless the command runs under it: then the
    # guest keeps the host's /tmp (read-only, through the overlay).
    for top in ("/run", "/dev", "/proc", "/sys"):
        if path == top or path.startswith(top + "/"):
            return True
    return False


_libc: ctypes.CDLL | None = None


def _load_libc() -> None:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.prctl  # noqa: B018 - resolve the symbol before forking
        except (OSError, AttributeError):
            _libc = None


def _qemu_preexec(parent: int) -> Callable[[], None]:
    """Runs in the forked child: die with the parent (even on SIGKILL)."""
    def preexec() -> None:
        if _libc is not None:
            _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)
    return preexec


def _spawn_qemu(cmd: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    """Start qemu in its own process group, set up to be SIGKILLed when this
    process dies (even by SIGKILL): util-linux's setpriv sets the parent-death
    signal and execs qemu (same pid); without setpriv, a preexec_fn does."""
    kw: dict[str, Any] = dict(stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT,
                              start_new_session=True)
    setpriv = shutil.which("setpriv")
    if setpriv:
        return subprocess.Popen([setpriv, "--pdeathsig", "KILL", "--", *cmd],
                                **kw)
    _load_libc()
    return subprocess.Popen(cmd, preexec_fn=_qemu_preexec(os.getpid()), **kw)


def _read_text(path: Path, limit: int | None = None) -> str:
    try:
        with open(path, "rb") as f:
            if limit is not None:
                size = os.fstat(f.fileno()).st_size
                if size > limit:
                    f.seek(size - limit)
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class _Streamer:
    """Copies new bytes of a growing file to a text stream."""

    def __init__(self, path: Path, stream: IO[str] | None):
        self.path = path
        self.stream = stream
        self.pos = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump(self, final: bool = False) -> None:
        if self.stream is None:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read(1 << 20)
                while data:
                    self.pos += len(data)
                    text = self.decoder.decode(data)
                    if text:
                        self.stream.write(text)
                    data = f.read(1 << 20)
        except FileNotFoundError:
            pass
        if final:
            tail = self.decoder.decode(b"", final=True)
            if tail:
                self.stream.write(tail)
        try:
            self.stream.flush()
        except (AttributeError, ValueError):
            pass


def _kill(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        proc.kill()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - should not happen
        proc.kill()
        proc.wait(timeout=30)


def _command_script(command: Sequence[str] | str, cwd: str) -> str:
    lines = [
        f". {_GUEST_SHARE}/env.sh",
        f"cd -- {shlex.quote(cwd)} || exit 125",
        "unset OLDPWD",
    ]
    if isinstance(command, str):
        lines.append(f"exec /bin/sh -c {shlex.quote(command)}")
    else:
        if not command:
            raise ValueError("empty command")
        lines.append("exec " + " ".join(shlex.quote(str(a)) for a in command))
    return "\n".join(lines) + "\n"


def _copy_out(tmp: Path, out_dir: str | os.PathLike[str] | None) -> None:
    if out_dir is None:
        return
    src = tmp / "share" / "out"
    if src.is_dir():
        shutil.copytree(src, out_dir, symlinks=True, dirs_exist_ok=True)


def run(command: Sequence[str] | str, *, two_host: bool = False,
        timeout: float = 600, boot_timeout: float = 120,
        memory: str | int = "1G", cpus: int = 2,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str | None] | None = None,
        out_dir: str | os.PathLike[str] | None = None,
        stream: IO[str] | None = None) -> VMResult:
    """Boot the VM, run *command* in it and return a :class:`VMResult`.

    *command* is an argv list (run with ``exec``) or a shell string (run with
    ``/bin/sh -c``).  It runs in *cwd* (default: the current directory, which
    must not be under /run or /dev: those are fresh in the guest; under
    /tmp the guest keeps the host's /tmp, copy-on-write)
    with the caller's PATH, PYTHONPATH, VIRTUAL_ENV, HOME, LANG, TERM, LC_*,
    PYENV*, PYTHON*, RDMA_* and PYTEST_* variables, the RDMA_TESTVM_*
    variables described in the module docstring, and *env* on top (a value
    of None removes a variable).

    *timeout* bounds the command (it is killed inside the guest, then
    :class:`VMTimeout` with ``step="command"`` is raised), *boot_timeout*
    the boot up to the point where RDMA is ready.  Files the command writes
    under ``$RDMA_TESTVM_OUT`` are copied to *out_dir* (also after a
    timeout).  *stream* receives the command's output while it runs.

    The returned ``returncode`` is the command's exit status as a shell
    reports it (128+N if it was killed by signal N).
    """
    t0 = time.monotonic()
    if timeout <= 0 or boot_timeout <= 0:
        raise ValueError("timeouts must be positive")
    cwd = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
    if _hidden_in_guest(cwd):
        raise ValueError(f"working directory {cwd} is not visible in the VM "
                         "(/run and /dev are fresh filesystems there)")
    mem = _parse_memory(memory)
    cpus = int(cpus)
    if cpus < 1:
        raise ValueError("cpus must be >= 1")
    guest_env = _guest_env(os.environ, env, two_host)
    script = _command_script(command, cwd)

    req = check_requirements()
    kernel, initrd = prepare(req)

    name = f"rdma-testvm-{uuid.uuid4().hex}"
    tmp = Path(tempfile.mkdtemp(prefix="rdma-testvm-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        share = tmp / "share"
        share.mkdir()
        (share / "out").mkdir()
        console_log = tmp / "console.log"
        qemu_log = tmp / "qemu.log"
        timeout_s = f"{float(timeout):.3f}"
        config = {
            "TESTVM_TWO_HOST": "1" if two_host else "0",
            "TESTVM_TIMEOUT": timeout_s,
            "TESTVM_TIMEOUT_MS": str(int(float(timeout) * 1000)),
            "TESTVM_KILL_AFTER": str(_KILL_AFTER),
            "TESTVM_CWD": cwd,
            "TESTVM_GID_INDEX": str(GID_INDEX),
            "TESTVM_RXE0_ADDR": RXE0_ADDR,
            "TESTVM_RXE0_GID": _mapped_gid(RXE0_ADDR),
            "TESTVM_HOST1_ADDR": HOST1_ADDR,
            "TESTVM_HOST1_GID": _mapped_gid(HOST1_ADDR),
            "TESTVM_HOST2_ADDR": HOST2_ADDR,
            "TESTVM_HOST2_GID": _mapped_gid(HOST2_ADDR),
        }
        (share / "config.sh").write_text(
            "".join(f"{k}={shlex.quote(v)}\n" for k, v in config.items()))
        (share / "env.sh").write_text(
            "".join(f"export {k}={shlex.quote(v)}\n"
                    for k, v in guest_env.items()))
        (share / "cmd.sh").write_text(script)

        qemu_cmd = [
            req.qemu, "-name", name,
            "-accel", "tcg", "-cpu", "max", "-m", mem, "-smp", str(cpus),
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-nic", "none",
            "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", _KERNEL_APPEND + (" rdmatestvm.keeptmp=1"
                                         if _under_tmp(cwd) else ""),
            "-chardev", f"file,id=console,path={_qemu_opt(console_log)}",
            "-serial", "chardev:console",
            "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,"
                      "multidevs=remap",
            "-device", "virtio-9p-pci,fsdev=root,mount_tag=/dev/root",
            "-fsdev", f"local,id=share,path={_qemu_opt(share)},"
                      "security_model=none,multidevs=remap",
            "-device", f"virtio-9p-pci,fsdev=share,mount_tag={_SHARE_TAG}",
        ]

        def collect(**kw: Any) -> dict[str, Any]:
            console = _read_text(console_log)
            return dict(console=console, dmesg=_read_text(share / "dmesg"),
                        output=_read_text(share / "output"), name=name, **kw)

        def vm_failure(what: str) -> VMError:
            info = collect()
            console = info["console"]
            panic = re.search(r"Kernel panic - not syncing.*", console)
            err = _read_text(share / "error").strip()
            if not err:
                m = re.search(r"RDMA-TESTVM-ERROR: (.*)", console)
                err = m.group(1).strip() if m else ""
            qlog = _read_text(qemu_log).strip()
            # The guest's own error comes first: a panic that only says init
            # exited after reporting it is a consequence, not the cause.
            if panic and err and "Attempted to kill init" in panic.group(0):
                panic = None
            if panic:
                msg = f"guest kernel panic: {panic.group(0).strip()}"
            elif err:
                msg = f"guest setup failed: {err}"
            elif qlog:
                msg = f"{what}: {_tail(qlog, 1)}"
            else:
                msg = what
            if qlog:
                msg += f"\nqemu: {_tail(qlog, 10)}"
            ctx = _tail(info["dmesg"] or console, 30)
            if ctx:
                msg += "\n--- " + ("dmesg" if info["dmesg"] else "console") \
                       + " tail ---\n" + ctx
            return VMError(msg, kernel_panic=bool(panic), **info)

        with open(qemu_log, "wb") as qlog_f:
            proc = _spawn_qemu(qemu_cmd, qlog_f)
        t_start = time.monotonic()

        # --- boot: until the guest writes "ready" ------------------------
        boot_deadline = t_start + boot_timeout
        while not (share / "ready").exists():
            if (share / "error").exists() or proc.poll() is not None:
                # The guest powers itself off after reporting an error.
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    _kill(proc)
                raise vm_failure(f"qemu exited during boot "
                                 f"(status {proc.returncode})")
            if time.monotonic() > boot_deadline:
                _kill(proc)
                info = collect()
                raise VMTimeout(
                    "boot", boot_timeout,
                    f"VM did not become ready within {boot_timeout:g} s\n"
                    f"--- console tail ---\n{_tail(info['console'], 30)}",
                    **info)
            time.sleep(_POLL)
        t_ready = time.monotonic()

        # --- the command ---------------------------------------------------
        streamer = _Streamer(share / "output", stream)
        cmd_deadline = t_ready + float(timeout) + _KILL_AFTER + _COMMAND_GRACE

        def finished() -> bool:
            return _read_text(share / "rc").endswith("\n")

        while not finished():
            streamer.pump()
            if proc.poll() is not None:
                # Re-check: the guest may have written rc just before exiting.
                if finished():
                    break
                streamer.pump(final=True)
                raise vm_failure(
                    f"VM died while the command was running "
                    f"(qemu status {proc.returncode})")
            if time.monotonic() > cmd_deadline:
                _kill(proc)
                streamer.pump(final=True)
                info = collect()
                raise VMTimeout(
                    "command", timeout,
                    f"command did not finish within {timeout:g} s and the "
                    "guest did not respond",
                    **info)
            time.sleep(_POLL)
        t_done = time.monotonic()
        streamer.pump(final=True)

        # --- shutdown ------------------------------------------------------
        clean = True
        try:
            proc.wait(timeout=_SHUTDOWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            clean = False
            _kill(proc)

        info = collect()
        rc_text = _read_text(share / "rc").strip()
        if (share / "timed_out").exists():
            raise VMTimeout(
                "command", timeout,
                f"command timed out after {timeout:g} s (killed in the guest)",
                **info)
        try:
            returncode = int(rc_text)
        except ValueError:
            raise vm_failure(f"bad exit status {rc_text!r} from the guest")
        result = VMResult(
            returncode=returncode, output=info["output"], dmesg=info["dmesg"],
            console=info["console"], boot_seconds=t_ready - t_start,
            total_seconds=0.0, command_seconds=t_done - t_ready, name=name,
            out_dir=Path(out_dir) if out_dir is not None else None,
            clean_shutdown=clean)
    except BaseException as exc:
        _kill(proc)
        # Hand back what the command wrote even when it failed or timed out,
        # but never let that hide the original error.
        try:
            _copy_out(tmp, out_dir)
        except OSError as e:
            exc.add_note(f"(could not copy $RDMA_TESTVM_OUT to {out_dir}: "
                         f"{e})")
        raise
    else:
        try:
            _copy_out(tmp, out_dir)
        except OSError as e:
            raise VMError(
                f"the command finished (exit status {result.returncode}) but "
                f"$RDMA_TESTVM_OUT could not be copied to {out_dir}: {e}",
                console=result.console, dmesg=result.dmesg,
                output=result.output, name=name) from e
    finally:
        _kill(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    result.total_seconds = time.monotonic() - t0
    return result
