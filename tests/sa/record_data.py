"""Record SA replies from opensm on ibsim into tests/sa/data/ (run by hand:
``.venv/bin/python tests/sa/record_data.py``).

What is recorded, as hex:

- ``pr_get``: a whole PathRecord GetResp MAD as received (one MAD);
- ``nr_table_shim``: a NodeRecord GetTableResp as Debian's ibsim shim delivers
  it: cut to one MAD, the records past it lost, no RMPP header filled in;
- ``nr_records``: every NodeRecord, one Get per LID (each exact: 108
  bytes before MAD byte 224);
- ``nr_table_rmpp``: the GetTableResp a kernel RMPP agent would deliver
  for all of them: one MAD/RMPP/SA header (RMPP version 1, DATA,
  Active|First|Last, PayloadLength = 20 + data) and the recorded records
  at AttributeOffset stride, as ib_mad reassembles it.  The shim cannot
  produce this, so decoder tests use it instead.
"""
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import TOPOLOGIES  # noqa: E402
from fabric import Fabric  # noqa: E402

from rdma import _mad as mad  # noqa: E402


def main() -> int:
    out = {}
    with tempfile.TemporaryDirectory() as tmp, \
            Fabric(TOPOLOGIES["2sw4hca"], Path(tmp)) as f:
        w = f.worker("Hca2")
        raw, _ = w.call("sa_raw", mad.MAD_METHOD_GET,
                        mad.SAPathRecord(SLID=4, DLID=1))
        out["pr_get"] = raw.hex()
        raw, _ = w.call("sa_raw", mad.MAD_METHOD_GET_TABLE,
                        mad.SANodeRecord())
        out["nr_table_shim"] = raw.hex()
        recs = []
        for lid in range(1, 7):
            recs.append(w.call("sa_get", mad.SANodeRecord(LID=lid)))
    out["nr_records"] = [r.pack().hex() for r in recs]
    stride = (mad.SANodeRecord.LENGTH + 7) // 8 * 8
    data = b"".join(r.pack().ljust(stride, b"\0") for r in recs)
    hdr = mad.SAHeader.unpack(bytes.fromhex(out["nr_table_shim"]))
    hdr.RMPPHeader.RMPPVersion = 1
    hdr.RMPPHeader.RMPPType = mad.RMPP_TYPE_DATA
    hdr.RMPPHeader.RMPPFlags = (mad.RMPP_FLAG_ACTIVE | mad.RMPP_FLAG_FIRST
                                | mad.RMPP_FLAG_LAST)
    hdr.RMPPHeader.data1 = 1
    hdr.RMPPHeader.data2 = 20 + len(data)
    hdr.attributeOffset = stride // 8
    # The kernel pads the last segment to a whole MAD: keep that padding.
    pad = (-len(data)) % 200
    out["nr_table_rmpp"] = (hdr.pack() + data + bytes(pad)).hex()
    path = HERE / "data" / "2sw4hca.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
