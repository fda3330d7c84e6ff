"""The pytest plugin's ``rdma_sa`` fixture on a simulated subnet: a
user's pytest run inside a shimmed process (ibsim's CA, opensm as SA)
gets a UMAD whose SA answers, instead of a skip."""
import sys
import textwrap
import xml.etree.ElementTree as ET

SAMPLE = '''
import rdma.IBA as IBA


def test_node_records(rdma_sa):
    recs = rdma_sa.SubnAdmGetTable(IBA.SANodeRecord)
    assert len(recs) == 6            # net.2sw2path4hca: 2 switches, 4 HCAs
    assert rdma_sa.end_port.lid in {r.LID for r in recs}


def test_path_to_self(rdma_sa, rdma_end_port):
    import rdma.path
    import rdma.sa
    p = rdma.path.IBPath(rdma_end_port, SGID=rdma_end_port.default_gid,
                         DGID=rdma_end_port.default_gid)
    rdma.sa.resolve_path(rdma_sa, p)
    assert p.DLID == rdma_end_port.lid
'''


def test_rdma_sa_fixture_on_ibsim(fabric, tmp_path):
    (tmp_path / "test_user_sa.py").write_text(textwrap.dedent(SAMPLE))
    xml = tmp_path / "out.xml"
    res = fabric.run([sys.executable, "-m", "pytest",
                      "-p", "no:cacheprovider", "-rs", f"--junitxml={xml}",
                      str(tmp_path / "test_user_sa.py")], "Hca2",
                     timeout=120, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    cases = {tc.get("name"): tc for tc in ET.parse(xml).getroot()
             .iter("testcase")}
    assert set(cases) == {"test_node_records", "test_path_to_self"}, out
    for name, tc in cases.items():
        assert tc.find("skipped") is None and tc.find("failure") is None \
            and tc.find("error") is None, (name, out)
