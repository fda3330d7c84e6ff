#!/usr/bin/env python3
"""Sleep until work completes: completion channels (python-rdma
"Completion Channels").

Polling a CQ in a loop burns a CPU.  A completion channel is a file
descriptor that becomes readable when an *armed* CQ gets a completion
(``cq.req_notify_cq()`` arms it for one event).  This script shows the
three ways to wait on it, each time for the send and receive completions
of a datagram a UD QP sends to itself:

1. ``select.poll`` with ``cc.register_poll(poll)`` and
   ``cc.check_poll(event)``, which reads and acknowledges the event,
   re-arms the CQ and returns it, as in the python-rdma documentation;
2. ``rdma.vtools.CQPoller(cq, cc).iterwc(timeout=...)``, which does all of
   that (arm, poll again, sleep; acknowledge in batches) for you;
3. ``rdma.aio.AsyncCQ(cq)`` in an asyncio program (``await acq.get()``).

Run:  python examples/completion_channels.py [--device D] [--provider P]
Exit status 0 when every wait returned the expected completions.
"""
import asyncio
import select
import sys
import time

import rdma
import rdma.aio
import rdma.ibverbs as ibv
import rdma.path
import rdma.vtools
from rdma.path import IBPath

import _example_util as util

QKEY = 0x44444444
DEPTH = 8


def main(args):
    end_port = util.get_end_port(args)
    gid = end_port.gids[util.pick_gid_index(end_port, args.gid_index)]
    print("end port", util.describe(end_port))
    with rdma.get_verbs(end_port) as ctx:
        # To set up the completion channel.
        cc = ctx.comp_channel()
        poll = select.poll()
        cc.register_poll(poll)
        cq = ctx.cq(2 * DEPTH, cc)
        cq.req_notify_cq()

        pd = ctx.pd()
        path = rdma.path.resolve_path(None, IBPath(end_port, DGID=gid,
                                                   qkey=QKEY))
        qp = pd.qp(ibv.IBV_QPT_UD, DEPTH, cq, DEPTH, cq)
        path.sqpn = path.dqpn = qp.qp_num           # send to ourselves
        qp.establish(path)
        pool = rdma.vtools.BufferPool(pd, count=2 * DEPTH, size=40 + 64)
        pool.post_recvs(qp, DEPTH)

        def send(text):
            idx = pool.pop()
            pool.copy_to(text, idx)
            qp.post_send(pool.make_send_wr(idx, len(text), path))

        # 1. select.poll + check_poll.
        def get_wcs(deadline):
            while time.monotonic() < deadline:
                ms = max(1, int((deadline - time.monotonic()) * 1000))
                for event in poll.poll(ms):
                    if cc.check_poll(event) is not None:
                        wcs = cq.poll()
                        if wcs:
                            return wcs
            raise RuntimeError("no completion event before the deadline")

        send(b"one")
        deadline = time.monotonic() + args.timeout
        wcs = []
        while len(wcs) < 2:
            wcs += get_wcs(deadline)
        pool.finish_wcs(qp, wcs)        # raises WCError if one failed
        print("1. select.poll woke up for",
              sorted(ibv.wc_opcode_str(wc.opcode) for wc in wcs))

        # 2. CQPoller sleeps on the same channel.
        poller = rdma.vtools.CQPoller(cq, cc)
        send(b"two")
        wcs = list(poller.iterwc(count=2, timeout=args.timeout))
        util.check(not poller.timedout and len(wcs) == 2,
                   "CQPoller timed out")
        pool.finish_wcs(qp, wcs)
        print("2. CQPoller returned",
              sorted(ibv.wc_opcode_str(wc.opcode) for wc in wcs))
        # Nothing more to come: it gives up after its timeout, idle.
        t0 = time.process_time()
        util.check(list(poller.iterwc(timeout=0.3)) == [] and
                   poller.timedout, "a completion came from nowhere")
        print(f"   an idle 0.3 s wait used {time.process_time() - t0:.3f} s "
              f"of CPU")

        # 3. asyncio: the channel's fd is watched by the event loop.
        async def echo():
            acq = rdma.aio.AsyncCQ(cq)
            send(b"three")
            got = []
            while len(got) < 2:
                wc = await asyncio.wait_for(acq.get(), args.timeout)
                got.append(wc)
            acq.close()
            return got

        wcs = asyncio.run(echo())
        pool.finish_wcs(qp, wcs)
        print("3. AsyncCQ returned",
              sorted(ibv.wc_opcode_str(wc.opcode) for wc in wcs))
        cq.close()          # acknowledges events still unacknowledged
    print("OK")
    return 0


main.parser = util.parser(__doc__)

if __name__ == "__main__":
    sys.exit(util.main_wrapper(main))
