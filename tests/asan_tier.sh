#!/bin/sh
# tests/asan_tier.sh JUNIT_XML [PYTEST ARGS...] - run VM tests against the
# AddressSanitizer build (build/variants/asan, made by tests/variants.py).
# Any ASan report fails the run (ASan exits 99 and the report is in stderr).
set -u
xml=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
export LD_PRELOAD="$(gcc -print-file-name=libasan.so)"
# Leak detection is off: CPython leaves its objects allocated at exit
# (with PYTHONMALLOC=malloc LeakSanitizer would report them all), and in
# a fabric process (gcc 12's libasan) LeakSanitizer's tracer dies with
# SIGSEGV on a bogus dynamic-TLS range of one of the node's threads
# unless LSAN_OPTIONS=use_tls=0.  A C verbs program under the front end
# (LD_PRELOAD="$(gcc -print-file-name=libasan.so) <asan build>/rdma/
# fabric/librdma_fabric_verbs.so") can be checked with
# ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=use_tls=0.
export ASAN_OPTIONS="detect_leaks=0:exitcode=99:abort_on_error=0:halt_on_error=1"
export PYTHONMALLOC=malloc
export PYTHONPATH="$root/build/variants/asan"
export RDMA_TEST_ASAN=1
"$root/.venv/bin/python" -P -c 'import rdma._ibverbs as m, sys; assert "variants/asan" in m.__file__, m.__file__' || exit 1
exec "$root/.venv/bin/python" -P -m pytest -p no:cacheprovider -q -rs \
    --junitxml="$xml" "$@"
