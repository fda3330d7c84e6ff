"""Print, as JSON, what the one device model sees in this process.

Run through the ibsim shim by tests/sa/test_device_model.py (one short-lived
shimmed process per call: ``python devmodel_probe.py <what> [args]``).
"""
import json
import sys

import rdma
import rdma.path
import rdma.umad
from rdma import IBA


def _port(p):
    return {"name": str(p), "port_id": p.port_id, "lid": p.lid,
            "lmc": p.lmc, "sm_lid": p.sm_lid, "sm_sl": p.sm_sl,
            "state": p.state, "phys_state": p.phys_state, "rate": p.rate,
            "rate_gbps": p.rate_gbps,
            "cap_mask": p.cap_mask, "port_guid": int(p.port_guid),
            "gids": [str(g) for g in p.gids], "pkeys": list(p.pkeys),
            "link_layer": p.link_layer, "has_umad": p.has_umad,
            "default_gid": str(p.default_gid)}


def devices(provider=None):
    out = []
    for d in rdma.get_devices(provider):
        out.append({"name": d.name, "provider": d.provider,
                    "node_guid": int(d.node_guid),
                    "sys_image_guid": int(d.sys_image_guid),
                    "node_type": d.node_type, "fw_ver": d.fw_ver,
                    "hw_ver": d.hw_ver, "hca_type": d.hca_type,
                    "has_verbs": d.has_verbs, "has_umad": d.has_umad,
                    "phys_port_cnt": d.phys_port_cnt,
                    "ports": [_port(p) for p in d.end_ports]})
    return out


def lookups():
    """Every way of naming the default end port finds the same port."""
    ep = rdma.get_end_port()
    dev = ep.parent
    found = {
        "none": rdma.get_end_port(),
        "device": rdma.get_end_port(dev.name),
        "device/port": rdma.get_end_port(f"{dev.name}/{ep.port_id}"),
        "port_guid": rdma.get_end_port(ep.port_guid),
        "port_guid_str": rdma.get_end_port(str(ep.port_guid)),
        "gid": rdma.get_end_port(ep.default_gid),
        "gid_str": rdma.get_end_port(str(ep.default_gid)),
        "node_guid": rdma.get_end_port(dev.node_guid),
        "umad_get_end_port": rdma.umad.get_end_port(),
        "first": rdma.get_devices().first().end_ports.first(),
        "by_name": rdma.get_devices()[dev.name].end_ports[ep.port_id],
        "by_guid": rdma.get_devices()[dev.node_guid].end_ports[ep.port_guid],
    }
    res = {k: str(v) for k, v in found.items()}
    res["get_device"] = str(rdma.get_device())
    res["device_by_guid"] = str(rdma.get_device(dev.node_guid))
    res["device_by_guid_str"] = str(rdma.get_device(str(dev.node_guid)))
    res["same_function"] = rdma.umad.get_end_port is rdma.get_end_port
    errors = {}
    for bad in ("xxx", f"{dev.name}/99", IBA.GID("::"), IBA.GUID(0),
                "0000:0000:0000:0000"):
        try:
            rdma.get_end_port(bad)
            errors[str(bad)] = None
        except rdma.RDMAError as e:
            errors[str(bad)] = str(e)
    res["errors"] = errors
    try:
        rdma.get_verbs(ep)
        res["verbs"] = None
    except rdma.RDMAError as e:
        res["verbs"] = str(e)
    with rdma.get_umad(ep) as u:
        res["umad"] = repr(u)
    with rdma.get_gmp_mad(ep) as g:
        res["gmp"] = type(g).__name__
    return res


def lazy_fabric():
    """Whether UCX (libucp) is loaded after each step: finding the
    simulated CA must not bring the software fabric up."""
    def ucx():
        with open("/proc/self/maps") as f:
            return "libucp" in f.read()
    steps = {"import": ucx()}
    ep = rdma.get_end_port()
    steps["get_end_port"] = (str(ep), ucx())
    devs = rdma.get_devices()
    steps["first"] = (str(devs.first()), ucx())
    steps["all"] = ([d.name for d in devs], ucx())
    return steps


def seed_ud(dgid):
    """The seed's UD example up to the path: get_end_port(), get_umad(),
    resolve_path() through the SA."""
    end_port = rdma.get_end_port()
    path = rdma.path.IBPath(end_port, dpqn=1, qkey=IBA.IB_DEFAULT_QP1_QKEY,
                            DGID=IBA.GID(dgid))
    with rdma.get_umad(path.end_port) as umad:
        rdma.path.resolve_path(umad, path, reversible=True)
    return {"end_port": str(end_port), "DLID": path.DLID,
            "SLID": path.SLID, "dqpn": path.dqpn, "SGID": str(path.SGID),
            "DGID": str(path.DGID)}


if __name__ == "__main__":
    what, args = sys.argv[1], [json.loads(a) for a in sys.argv[2:]]
    print(json.dumps(globals()[what](*args)))
