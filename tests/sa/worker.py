"""A shimmed worker: runs ``sa_ops`` functions for the test process.

Started by ``fabric.Worker`` with the ibsim shim in ``LD_PRELOAD`` and
``SIM_HOST=<node>``.  Protocol on stdin/stdout: a 4-byte little-endian
length, then a pickle; requests are ``(op, args, kwargs)``, answers
``("ok", value)`` or ``("err", exception)``.  EOF on stdin ends it (so the
shim releases its ibsim slot); SIGTERM does too.
"""
import os
import pickle
import signal
import struct
import sys


def _read(f, n):
    buf = b""
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def main() -> int:
    # Keep the protocol channel for ourselves; stray prints go to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = os.fdopen(os.dup(0), "rb")
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    import sa_ops
    try:
        while True:
            head = _read(inp, 4)
            if head is None:
                return 0
            (n,) = struct.unpack("<I", head)
            op, args, kw = pickle.loads(_read(inp, n))
            try:
                reply = ("ok", getattr(sa_ops, op)(*args, **kw))
            except BaseException as e:      # noqa: BLE001 - sent back
                try:
                    pickle.dumps(e)
                except Exception:           # noqa: BLE001
                    e = RuntimeError(f"{type(e).__name__}: {e}")
                reply = ("err", e)
            data = pickle.dumps(reply)
            out.write(struct.pack("<I", len(data)) + data)
            out.flush()
    finally:
        sa_ops.close()


if __name__ == "__main__":
    sys.exit(main())
