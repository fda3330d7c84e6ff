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
"""
import os

from setuptools import Extension, setup

SOURCES = [
    "csrc/module.c",
    "csrc/errors.c",
    "csrc/obj.c",
    "csrc/structs.c",
    "csrc/context.c",
    "csrc/pd.c",
    "csrc/cq.c",
    "csrc/qp.c",
    "csrc/mr.c",
    "csrc/wr.c",
    "csrc/capi.c",
    "csrc/provider_verbs.c",
    "csrc/provider_ucx.c",
]

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

setup(
    ext_modules=[
        Extension(
            "rdma._ibverbs",
            sources=SOURCES,
            depends=["csrc/rdma.h", "csrc/provider.h", "csrc/constants.inc",
                     "rdma/include/pyrdma.h"],
            include_dirs=["rdma/include"],
            define_macros=macros,
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            libraries=libraries,
        ),
        Extension(
            "rdma._umad",
            sources=["csrc/umad.c"],
            depends=[],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
            libraries=["dl"],
        ),
    ],
)
