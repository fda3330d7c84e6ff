"""A stand-in for python-rdma's IBPath: just the attributes resolve_path
reads and writes (the real rdma.path.IBPath comes later)."""


class StubPath:
    """An IBPath-shaped plain object."""

    FIELDS = ("end_port", "SGID", "DGID", "SLID", "DLID", "SL", "pkey",
              "MTU", "rate", "packet_life_time", "flow_label", "hop_limit",
              "traffic_class", "has_grh", "qkey", "dqpn", "sqpn")

    def __init__(self, end_port=None, **kw):
        for f in self.FIELDS:
            setattr(self, f, None)
        self.end_port = end_port
        self.has_grh = False
        for k, v in kw.items():
            if k not in self.FIELDS:
                raise AttributeError(k)
            setattr(self, k, v)

    def as_dict(self):
        """Every attribute except end_port, GIDs as text."""
        return {f: (str(getattr(self, f)) if f in ("SGID", "DGID")
                    else getattr(self, f))
                for f in self.FIELDS if f != "end_port"}
