"""Which files may skip PIL: a JPEG header check, bytes only (no decoding).

The device decoder (nvjpeg through ``torchvision.io.decode_jpeg``) gets a file only when
it would give the picture PIL gives: a complete (ends with EOI), 8-bit, Huffman-coded
baseline, extended or progressive JPEG with 1 (grey) or 3 (YCbCr) components, no EXIF
rotation (orientation 1 or none; nor an XMP ``tiff:Orientation``, which Pillow applies
when EXIF has none), no Adobe RGB/CMYK/YCCK transform, at most
:data:`~pairkit.encode.views.MAX_WHOLE_RESIZE_ASPECT` times longer than wide (the device
resizes view 0 whole: a 3 x 9000 strip scaled to short side 64 needed a 192000 x 9000
resampling matrix) and within PIL's decompression-bomb limit. Everything else (PNG, WebP,
CMYK, 16-bit, EXIF-rotated, thin, truncated or broken files) keeps the PIL path and its
errors.jsonl reasons.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from pairkit.encode.views import MAX_WHOLE_RESIZE_ASPECT

# start-of-frame markers: baseline, extended sequential, progressive (Huffman coded)
_SOF_PLAIN = {0xC0, 0xC1, 0xC2}
# the other SOFs: lossless, hierarchical, arithmetic coded
_SOF_OTHER = {0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_XMP = b"http://ns.adobe.com/xap/1.0/\x00"
# how Pillow's getexif() reads the orientation of an XMP packet (when EXIF has none)
_XMP_ORIENTATION = re.compile(rb'tiff:Orientation(="|>)([0-9])')


@dataclass(frozen=True)
class JpegInfo:
    """What the header says: ``width``, ``height``, ``components`` and whether the device
    decoder may take the file (``plain``), else ``why`` not."""

    width: int = 0
    height: int = 0
    components: int = 0
    plain: bool = False
    why: str = ""


def inspect_jpeg(data: bytes, max_pixels: int | None = None) -> JpegInfo:
    """Parse the markers of ``data`` up to the first scan; never raises.

    ``max_pixels``: PIL's decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``); a larger
    picture is not plain (PIL then refuses it with its usual reason).
    """
    if len(data) < 4 or data[:2] != b"\xff\xd8":
        return JpegInfo(why="not a JPEG")
    if data.rstrip(b"\x00\r\n ")[-2:] != b"\xff\xd9":
        return JpegInfo(why="no end-of-image marker (truncated?)")
    pos, n = 2, len(data)
    width = height = comps = 0
    sof = adobe_transform = exif_orientation = None
    xmp = b""
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return JpegInfo(why="corrupt marker")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        seg = data[pos + 4 : pos + 2 + length]
        if length < 2 or len(seg) != length - 2:
            return JpegInfo(why="truncated header")
        if marker in _SOF_OTHER:
            return JpegInfo(why="lossless, hierarchical or arithmetic-coded JPEG")
        if marker in _SOF_PLAIN:
            if len(seg) < 6:
                return JpegInfo(why="truncated header")
            precision, height, width, comps = struct.unpack(">BHHB", seg[:6])
            sof = marker
            if precision != 8:
                return JpegInfo(width, height, comps, why=f"{precision}-bit JPEG")
            if comps not in (1, 3):
                return JpegInfo(width, height, comps, why=f"{comps} components (CMYK?)")
        elif marker == 0xE1 and seg[:6] == b"Exif\x00\x00":
            orientation = _exif_orientation(seg[6:])
            if orientation not in (None, 1):
                return JpegInfo(width, height, comps, why=f"EXIF orientation {orientation}")
            exif_orientation = exif_orientation or orientation
        elif marker == 0xE1 and seg.startswith(_XMP):
            xmp = seg[len(_XMP):]  # Pillow keeps the last packet
        elif marker == 0xEE and seg[:5] == b"Adobe" and len(seg) >= 12:
            adobe_transform = seg[11]
        elif marker == 0xDA:  # start of scan: the header is over
            break
        pos += 2 + length
    if sof is None:
        return JpegInfo(why="no frame header")
    match = _XMP_ORIENTATION.search(xmp) if exif_orientation is None else None
    if match and int(match[2]) != 1:  # PIL rotates by it (exif_transpose) as by EXIF's
        return JpegInfo(width, height, comps, why=f"XMP orientation {int(match[2])}")
    if adobe_transform == 0 and comps == 3:  # RGB samples, not YCbCr
        return JpegInfo(width, height, comps, why="Adobe RGB transform")
    if width == 0 or height == 0:
        return JpegInfo(width, height, comps, why="no image size in the frame header")
    if max(width, height) > MAX_WHOLE_RESIZE_ASPECT * min(width, height):
        return JpegInfo(width, height, comps,
                        why=f"more than {MAX_WHOLE_RESIZE_ASPECT} times longer than wide")
    if max_pixels is not None and width * height > max_pixels:
        return JpegInfo(width, height, comps, why="larger than the decompression-bomb limit")
    return JpegInfo(width, height, comps, plain=True)


def _exif_orientation(tiff: bytes) -> int | None:
    """The orientation tag (0x0112) of IFD0 of a TIFF-structured EXIF block, or None."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return None
    end = "<" if tiff[:2] == b"II" else ">"
    try:
        (ifd,) = struct.unpack(end + "I", tiff[4:8])
        (count,) = struct.unpack(end + "H", tiff[ifd : ifd + 2])
        for i in range(count):
            entry = tiff[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
            tag, typ, _, value = struct.unpack(end + "HHI4s", entry)
            if tag == 0x0112:
                (v,) = struct.unpack(end + "H", value[:2]) if typ == 3 else (value[0],)
                return int(v)
    except struct.error:
        return 0  # unreadable EXIF: let PIL decide
    return None
