"""Build the Cython example against the rdma C API (rdma.get_include())."""
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

import rdma

here = os.path.dirname(os.path.abspath(__file__))
setup(
    name="rdma-fastloop-example",
    ext_modules=cythonize(
        [Extension("fastloop", [os.path.join(here, "fastloop.pyx")],
                   include_dirs=[rdma.get_include()])],
        include_path=[os.path.dirname(os.path.dirname(rdma.__file__))],
        language_level=3, quiet=True),
    script_args=None,
)
