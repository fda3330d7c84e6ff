"""Build the rdma._ibverbs C extension.

Build options (environment variables):

``RDMA_LINK_IBVERBS=1``
    link libibverbs directly instead of loading it with dlopen at run time
    (needs rdma-core at import time; saves one indirection).
``RDMA_DEBUG=asan``
    a debug build with AddressSanitizer (-O1 -g -fsanitize=address); run it
    with the ASan runtime preloaded (see tests/README).
``RDMA_WERROR=1``
    turn compiler warnings into errors (CI does).

Besides the extensions, build_ext builds three shared libraries with no
Python in them, next to the package's rdma/fabric/__init__.py:

``librdma_fabric.so``
    the software fabric (csrc/fabric/) on its own; it exports
    ``pyrdma_fabric_provider()`` and ``pyrdma_fabric_version()`` only
    (csrc/fabric_lib.h);
``librdma_fabric_verbs.so``
    the ibv_* front end for unmodified C programs (csrc/fabric_verbs/),
    loaded with LD_PRELOAD (``python -m rdma.fabric preload``);
``librdma_umad2sim.so``
    the ibsim client shim (csrc/umad2sim/): preloaded into opensm,
    infiniband-diags or rdma, it gives libibumad a simulated CA on a node
    of an ibsim fabric (``rdma.simnet.shim_path()``, docs/sa.rst).
"""
import glob
import os
import shlex
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The software fabric (csrc/fabric/: fabric.h and wire.h are its headers).
FABRIC_SOURCES = ["csrc/fabric/" + f + ".c" for f in (
    "node", "peer", "auth", "wire", "ring", "mr", "adopt", "cq", "qp", "req",
    "resp", "rel", "sqd", "mw", "mcast", "ops", "cm", "cm_conn", "cm_msg",
    "cm_addr", "cm_mcast")]
FABRIC_HEADERS = ["csrc/fabric/fabric.h", "csrc/fabric/wire.h",
                  "csrc/fabric/cm.h"]

SOURCES = [
    "csrc/module.c",
    "csrc/errors.c",
    "csrc/status.c",
    "csrc/dlload.c",
    "csrc/settings.c",
    "csrc/obj.c",
    "csrc/structs.c",
    "csrc/context.c",
    "csrc/pd.c",
    "csrc/cq.c",
    "csrc/qp.c",
    "csrc/mr.c",
    "csrc/wr.c",
    "csrc/capi.c",
    "csrc/vqp.c",
    "csrc/vcq.c",
    "csrc/vqp_data.c",
    "csrc/cm.c",
    "csrc/provider_verbs.c",
    "csrc/provider_stubs.c",
] + FABRIC_SOURCES

cflags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
          "-fvisibility=hidden"]
ldflags = []
libraries = ["dl"]
macros = []

if os.environ.get("RDMA_LINK_IBVERBS", "") not in ("", "0"):
    macros.append(("PYRDMA_LINK_IBVERBS", "1"))
    libraries.append("ibverbs")
if os.environ.get("RDMA_DEBUG", "") == "asan":
    cflags += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address"]
    ldflags += ["-fsanitize=address"]
if os.environ.get("RDMA_WERROR", "") not in ("", "0"):
    cflags.append("-Werror")

# The standalone libraries: (name, sources, extra link arguments).
FABRIC_LIB = ("librdma_fabric.so",
              ["csrc/status.c", "csrc/dlload.c", "csrc/settings.c",
               "csrc/fabric_lib.c"]
              + FABRIC_SOURCES,
              ["-ldl", "-lpthread"])
FRONT_LIB = ("librdma_fabric_verbs.so",
             ["csrc/fabric_verbs/device.c", "csrc/fabric_verbs/objects.c",
              "csrc/fabric_verbs/datapath.c", "csrc/fabric_verbs/extended.c",
              "csrc/fabric_verbs/convert.c", "csrc/fabric_verbs/cm_front.c",
              "csrc/fabric_verbs/import.c",
              "csrc/fabric_verbs/cm_front_ep.c",
              "csrc/fabric_verbs/cm_front_real.c",
              "csrc/fabric_verbs/rsocket.c",
              "csrc/fabric_verbs/rsocket_api.c",
              "csrc/fabric_verbs/rsocket_io.c",
              "csrc/fabric_verbs/rsocket_poll.c", "csrc/status.c",
              "csrc/settings.c"],
             ["-L{outdir}", "-l:librdma_fabric.so", "-Wl,-rpath,$ORIGIN",
              "-Wl,--version-script=csrc/fabric_verbs/ibv_front.map",
              "-ldl", "-lpthread"])
#: The ibsim client shim (csrc/umad2sim/), preloaded by ``ibtool simnet``
#: and tests/sa (found with rdma.simnet.shim_path()).
UMAD2SIM_LIB = ("librdma_umad2sim.so",
                ["csrc/umad2sim/" + f + ".c" for f in (
                    "preload", "link", "sysfs", "agents", "io", "rmpp")],
                ["-ldl", "-lpthread"])
LIB_DEPENDS = (["csrc/provider.h", "csrc/dlload.h", "csrc/fabric_lib.h",
                "csrc/settings.h",
                "rdma/include/pyrdma.h"] + FABRIC_HEADERS)


class BuildExtAndLibs(build_ext):
    """build_ext, then the two Python-free shared libraries (if stale)."""

    def run(self) -> None:
        super().run()
        if self.inplace:
            outdir = os.path.join("rdma", "fabric")
        else:
            outdir = os.path.join(self.build_lib, "rdma", "fabric")
        os.makedirs(outdir, exist_ok=True)
        for name, sources, link in (FABRIC_LIB, FRONT_LIB, UMAD2SIM_LIB):
            self._shared_lib(outdir, name, sources, link)

    def _shared_lib(self, outdir: str, name: str, sources: list,
                    link: list) -> None:
        target = os.path.join(outdir, name)
        deps = sources + LIB_DEPENDS
        if name == UMAD2SIM_LIB[0]:
            deps = sources + ["csrc/umad2sim/umad2sim.h"]
        if name == FRONT_LIB[0]:
            deps += [os.path.join(outdir, FABRIC_LIB[0]),
                     "csrc/fabric_verbs/ibv_front.map",
                     "csrc/fabric_verbs/front.h",
                     "csrc/fabric_verbs/cm_front.h",
                     "csrc/fabric_verbs/rsocket.h"]
        if (not self.force and os.path.exists(target) and
                all(os.path.getmtime(d) <= os.path.getmtime(target)
                    for d in deps)):
            return
        cc = shlex.split(os.environ.get("CC", "cc"))
        cmd = (cc + ["-shared", "-fPIC", "-O2", "-g", "-pthread"] + cflags +
               ["-Icsrc", "-Irdma/include", "-o", target + ".tmp"] + sources +
               ldflags + ["-Wl,--no-undefined", "-Wl,-soname," + name] +
               [a.format(outdir=outdir) for a in link])
        print(" ".join(shlex.quote(c) for c in cmd))
        subprocess.check_call(cmd)
        os.replace(target + ".tmp", target)


# ibtool's shell completions and man pages, generated from its argparse
# parsers into rdma/cli/data/ (python -m rdma.cli.completion bash|zsh,
# python -m rdma.cli.manpages; tests/host/test_cli_completion.py checks
# they are current), installed where bash-completion, zsh's compinit and
# man look under the installation prefix.
CLI_DATA = "rdma/cli/data/"
DATA_FILES = [
    ("share/bash-completion/completions", [CLI_DATA + "bash/ibtool"]),
    ("share/zsh/site-functions", [CLI_DATA + "zsh/_ibtool"]),
    ("share/man/man1", sorted(glob.glob(CLI_DATA + "man/*.1"))),
]

setup(
    cmdclass={"build_ext": BuildExtAndLibs},
    data_files=DATA_FILES,
    ext_modules=[
        Extension(
            "rdma._ibverbs",
            sources=SOURCES,
            depends=["csrc/rdma.h", "csrc/vqp.h", "csrc/provider.h",
                     "csrc/constants.inc",
                     "csrc/errors.h", "csrc/dlload.h", "csrc/settings.h",
                     "rdma/include/pyrdma.h"] + FABRIC_HEADERS,
            include_dirs=["rdma/include"],
            define_macros=macros,
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            libraries=libraries,
        ),
        Extension(
            "rdma._umad",
            # errors.c, status.c, dlload.c and settings.c are shared with
            # rdma._ibverbs
            sources=["csrc/umad.c", "csrc/errors.c", "csrc/status.c",
                     "csrc/dlload.c", "csrc/settings.c"],
            depends=["csrc/errors.h", "csrc/provider.h", "csrc/dlload.h",
                     "csrc/settings.h", "rdma/include/pyrdma.h"],
            include_dirs=["rdma/include"],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            libraries=["dl"],
        ),
    ],
)
