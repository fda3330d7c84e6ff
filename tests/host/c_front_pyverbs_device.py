"""What rdma-core's provider tests check of a device, on ucx0 through the
verbs front end with rdma-core's pyverbs: run with Debian's
/usr/bin/python3 under ``python -m rdma.fabric exec`` by
tests/host/test_c_front.py.  Prints one ``key=value`` line per check::

    c_front_pyverbs_device.py [DEV]
"""
import errno
import os
import sys

import pyverbs.device as d
from pyverbs.cq import CQ, CQEX, CqInitAttrEx
from pyverbs.pyverbs_error import PyverbsRDMAError


def errname(fn):
    """The errno name fn() fails with, or "ok"."""
    try:
        fn()
    except PyverbsRDMAError as ex:
        code = abs(ex.error_code)     # query_gid_table gives -EINVAL
        return errno.errorcode.get(code, str(code))
    return "ok"


def main(argv):
    dev = argv[0] if argv else "ucx0"
    with d.Context(name=dev) as ctx:
        attr = ctx.query_device()
        ex = ctx.query_device_ex()
        print(f"vendor_id_set={int(attr.vendor_id != 0)}")
        print(f"phys_port_cnt={attr.phys_port_cnt} "
              f"{ex.orig_attr.phys_port_cnt} {ex.phys_port_cnt_ex}")
        # an IB HCA's GID table: entry 0 set, the others empty (ENODATA
        # from ibv_query_gid_ex, a zero GID from ibv_query_gid)
        tbl = ctx.query_port(1).gid_tbl_len
        print(f"gid_tbl_len_over_1={int(tbl > 1)}")
        print("gid_ex_empty=" + errname(
            lambda: ctx.query_gid_ex(port_num=1, gid_index=tbl - 1)))
        print(f"gid_empty={ctx.query_gid(1, tbl - 1)}")
        print(f"gid_table={len(ctx.query_gid_table(tbl))}")
        print("gid_table_too_small=" + errname(
            lambda: ctx.query_gid_table(0)))
        nvec = ctx.num_comp_vectors
        print(f"num_comp_vectors={nvec}")
        print("cq_too_big=" + errname(
            lambda: CQ(ctx, attr.max_cqe + 1, None, None, 0)))
        print("cq_bad_vector=" + errname(
            lambda: CQ(ctx, 16, None, None, nvec + 1)))
        print("cq_last_vector=" + errname(
            lambda: CQ(ctx, 16, None, None, nvec - 1).close()))
        print("cqex_too_big=" + errname(lambda: CQEX(ctx, CqInitAttrEx(
            cqe=attr.max_cqe + 1, wc_flags=0, comp_mask=0, flags=0))))
        a = CqInitAttrEx(16, wc_flags=0, comp_mask=0, flags=0)
        a.comp_vector = nvec + 1
        print("cqex_bad_vector=" + errname(lambda: CQEX(ctx, a)))
        # the context's command descriptor is a real one, and a dup of it
        # imports the context (in this process; the new context owns the
        # descriptor and closes it)
        try:
            fd = os.dup(ctx.cmd_fd)
        except OSError as e:
            print(f"cmd_fd_dup={errno.errorcode[e.errno]}")
            return 0
        print("cmd_fd_dup=ok")
        print("import_device=" + errname(
            lambda: d.Context(cmd_fd=fd).close()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
