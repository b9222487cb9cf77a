"""Loading torch files safely: tensors and plain containers only, one-line refusals."""

from __future__ import annotations

import os
import pickle
import warnings
from typing import Any

from pairkit.errors import PairkitError


def torch_load_weights(path: str | os.PathLike[str], what: str) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True)`` with pairkit's messages.

    A file holding pickled Python objects beyond tensors and plain containers is refused
    in one line (torch's own advice to turn ``weights_only`` off is not repeated: pairkit
    never does); bytes that are no pickle torch can read (a damaged file, a text file) are
    said to be no torch weights. Any other failure says the file is unreadable.
    """
    import torch

    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise PairkitError(f"{what} {path} is unreadable: {exc.strerror or exc}") from None
    if head.startswith(b"\x93NUMPY"):
        raise PairkitError(f"{what} {path} is a NumPy .npy file, not a torch state dict "
                           "(save one with torch.save, or .safetensors)")
    # torch.save writes a zip archive (PK..), older torch a pickle (protocol byte 0x80)
    if head and not head.startswith((b"PK\x03\x04", b"\x80")):
        raise PairkitError(f"{what} {path} is unreadable: not a torch checkpoint (neither "
                           "torch.save's archive nor a pickle) nor .safetensors")
    try:
        with warnings.catch_warnings():  # torch's pickle-protocol chatter is not for users
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "global" not in str(exc).lower():  # not a class or function: bytes torch can't read
            raise PairkitError(f"{what} {path} is unreadable: not a file of torch weights "
                               "(damaged, or of another kind)") from None
        raise PairkitError(
            f"{what} {path} is unreadable: it holds pickled Python objects, not only weights; "
            "pairkit loads tensors only (save a plain state dict or .safetensors)"
        ) from None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise PairkitError(f"{what} {path} is unreadable: {first}") from None
