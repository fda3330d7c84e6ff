"""Adopted user memory beside a kernel RDMA device (csrc/fabric/adopt.c).

A process that has rxe open (``/dev/infiniband/uverbs*``) may register the
same pages there, which pins them: the fabric then neither adopts its
memory (that would replace the pages rxe holds) nor gives adopted pages
back (rxe may have registered the segment's pages meanwhile).  The kept
segment goes once the program unmaps the range.  Run in a process of its
own (the fabric is per process).
"""
import json
import os
import subprocess
import sys

SCRIPT = r"""
import json, mmap, sys
import rdma
PAGE = mmap.PAGESIZE
MR_ALL = 1 | 2 | 4 | 8          # local write, remote write/read/atomic

def sysv():
    with open("/proc/self/maps") as f:
        return sum("/SYSV" in line for line in f)

def shared(addr):
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return "/SYSV" in line
    return False

def anon(n):
    return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)

out = {}
u = rdma.get_verbs(rdma.get_end_port(provider="ucx"))
pd = u.pd()
base = sysv()
m = anon(4 * PAGE)
m[:4] = b"abcd"
mr = pd.mr(m, MR_ALL)
addr = mr.addr
out["adopted"] = shared(addr)
v = rdma.get_verbs(rdma.get_end_port(sys.argv[1], provider="verbs"))
vmr = v.pd().mr(m, 1)           # rxe pins the segment's pages
m[4:8] = b"efgh"
mr.close()
out["kept"] = shared(addr)      # not given back: rxe holds these pages
m2 = anon(2 * PAGE)
r = pd.mr(m2, MR_ALL)
out["not_adopted"] = not shared(r.addr)   # (r is open here)
r.close()
vmr.close()
v.close()
out["data"] = bytes(m[:8]).decode()
m.close()
r = pd.mr(memoryview(anon(2 * PAGE))[8:PAGE], MR_ALL)  # reclaims
out["left"] = sysv() - base
r.close()
u.close()
print(json.dumps(out))
"""


def test_adoption_beside_a_kernel_device(device, tmp_path):
    env = dict(os.environ, UCX_TLS="shm,self", UCX_WARN_UNUSED_ENV_VARS="n",
               RDMA_UCX_DIR=str(tmp_path / "d"))
    env.pop("RDMA_UCX_ADOPT", None)
    env.pop("RDMA_PROVIDER", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT, device], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res == {"adopted": True, "kept": True, "not_adopted": True,
                   "data": "abcdefgh", "left": 0}, res
