"""RMPP in user space: joining the DATA segments of a multi-MAD answer.

The kernel does this for an agent registered with an RMPP version (that
is what :class:`rdma.umad.UMAD` normally uses for the SA).  Where the
umad layer does not, :class:`RMPPReassembler` takes the raw segments
(IBA 13.6.2: MAD header, RMPP header, class header, data), returns the
ACK to send for each one (so that a windowing sender goes on) and, after
the segment flagged Last, the whole message as the kernel delivers it:
the first segment whole, then the data part of every following segment,
cut to the length the last segment's PayloadLength gives.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from rdma._mad import MADError, MADFormatError

__all__ = ["RMPPReassembler", "RMPP_TYPE_DATA", "RMPP_TYPE_ACK",
           "RMPP_TYPE_STOP", "RMPP_TYPE_ABORT", "rmpp_flags", "MAX_BYTES"]

RMPP_TYPE_DATA = 1
RMPP_TYPE_ACK = 2
RMPP_TYPE_STOP = 3
RMPP_TYPE_ABORT = 4
_ACTIVE, _FIRST, _LAST = 1, 2, 4
#: Bytes of the MAD and RMPP headers (PayloadLength counts from here).
_RMPP_HDR_END = 36
_MAD = 256
#: The default bound of a joined message: 64 MiB (a million 64-byte SA
#: records).
MAX_BYTES = 64 << 20


def rmpp_flags(mad: bytes) -> int:
    """The RMPPFlags of a MAD (0 for one too short to have them)."""
    return mad[26] & 0x7 if len(mad) > 26 else 0


class RMPPReassembler:
    """The receiving side of one RMPP transfer.

    ``hdr_len`` is where the class data starts (56 for the SA: MAD, RMPP
    and SA headers); ``window`` is how many segments past the last one
    received the ACKs let the sender send; ``max_bytes`` bounds the joined
    message (:data:`MAX_BYTES` by default), so that a sender that never
    sends the Last segment cannot make it grow without end.
    """

    def __init__(self, hdr_len: int = 56, window: int = 32,
                 max_bytes: Optional[int] = None):
        if not _RMPP_HDR_END <= hdr_len < _MAD:
            raise ValueError(f"hdr_len {hdr_len} is not inside a MAD")
        self.hdr_len = hdr_len
        self.window = window
        self.max_bytes = MAX_BYTES if max_bytes is None else int(max_bytes)
        self.segments = 0               # contiguous segments received
        self._parts: List[bytes] = []
        self.message: Optional[bytes] = None

    @property
    def done(self) -> bool:
        """True once the Last segment has been joined."""
        return self.message is not None

    def add(self, mad: bytes) -> Tuple[Optional[bytes], Optional[bytes]]:
        """Take one received MAD of the transfer: ``(ack, message)``.

        ``ack`` is the ACK MAD to send back (None for a duplicate that
        needs none), ``message`` the joined answer once the Last segment
        is in.  A segment from the past is acknowledged again (its ACK was
        lost); one that skips ahead is dropped (None, None), as IBA
        13.6.5.3 wants.  Raises :class:`rdma.IBA.MADFormatError` for
        anything that is not a well-formed DATA segment, and
        :class:`rdma.IBA.MADError` when the sender sends STOP or ABORT.
        """
        mad = bytes(mad)
        if self.done:
            raise MADFormatError(msg="RMPP segment after the Last one")
        if len(mad) < self.hdr_len:
            raise MADFormatError(msg=f"RMPP segment of {len(mad)} bytes, "
                                     f"the headers alone are "
                                     f"{self.hdr_len}", reply=mad)
        version, kind, flags = mad[24], mad[25], rmpp_flags(mad)
        if kind in (RMPP_TYPE_STOP, RMPP_TYPE_ABORT):
            raise MADError(msg=f"the sender ended the RMPP transfer "
                               f"({'STOP' if kind == 3 else 'ABORT'}, "
                               f"status {mad[27]})", reply=mad)
        if version != 1 or kind != RMPP_TYPE_DATA or not flags & _ACTIVE:
            raise MADFormatError(msg=f"not an RMPP DATA segment (version "
                                     f"{version}, type {kind}, flags "
                                     f"{flags:#x})", reply=mad)
        seg = int.from_bytes(mad[28:32], "big")
        paylen = int.from_bytes(mad[32:36], "big")
        if seg == 0:
            raise MADFormatError(msg="RMPP segment number 0", reply=mad)
        if (seg == 1) != bool(flags & _FIRST):
            raise MADFormatError(msg=f"RMPP segment {seg} with First "
                                     f"flag {bool(flags & _FIRST)}",
                                 reply=mad)
        if seg <= self.segments:
            return self._ack(mad), None          # a retransmission
        if seg != self.segments + 1:
            return None, None                    # a gap: wait for it
        if seg > 1 and \
                self.hdr_len + (seg - 1) * (_MAD - self.hdr_len) >= \
                self.max_bytes:
            raise MADFormatError(msg=f"RMPP transfer longer than "
                                     f"{self.max_bytes} bytes (segment "
                                     f"{seg} without the Last flag)",
                                 reply=mad)
        data = mad[:_MAD].ljust(_MAD, b"\0")
        self._parts.append(data if seg == 1 else data[self.hdr_len:])
        self.segments = seg
        if flags & _LAST:
            per = _MAD - self.hdr_len
            # PayloadLength of the Last segment counts the bytes after the
            # RMPP header in it (the kernel's get_mad_len does the same).
            pad = (_MAD - _RMPP_HDR_END) - paylen
            if not 0 <= pad <= per:
                raise MADFormatError(msg=f"RMPP Last segment PayloadLength "
                                         f"{paylen} is impossible",
                                     reply=mad)
            total = self.hdr_len + seg * per - pad
            self.message = b"".join(self._parts)[:total]
        return self._ack(mad), self.message

    def _ack(self, data: bytes) -> bytes:
        """The ACK of the segments received so far (13.6.2.3): the data's
        MAD header, RMPP type ACK, SegmentNumber and NewWindowLast."""
        ack = bytearray(data[:_RMPP_HDR_END].ljust(_MAD, b"\0"))
        ack[25] = RMPP_TYPE_ACK
        ack[26] = (ack[26] & 0xF8) | _ACTIVE
        ack[27] = 0
        ack[28:32] = self.segments.to_bytes(4, "big")
        ack[32:36] = (self.segments + self.window).to_bytes(4, "big")
        return bytes(ack)
