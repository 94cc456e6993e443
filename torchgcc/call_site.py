"""Where a warning about a call should point: the first frame outside the torchgcc library and torch.

``warnings.warn(..., stacklevel=n)`` names the line ``n`` frames up. A fixed ``n`` is right for one way of reaching
the warning and wrong for the others (a decoder called directly, through ``nn.Module.__call__``, through
:class:`torchgcc.CodedModule`); Python 3.12's ``skip_file_prefixes`` solves this, and this is its equivalent for 3.11.
"""

from __future__ import annotations

import os
import sys

import torch

__all__ = ["internal", "user_stacklevel"]

#: Source folders whose frames a warning skips: the library's and torch's (``nn.Module``'s call frames) ...
INTERNAL_FOLDERS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, torch.__file__))
#: ... except the application's, a user of the library like any other.
APPLICATION_FOLDER = os.path.join(INTERNAL_FOLDERS[0], "app") + os.sep


def internal(filename: str) -> bool:
    """Whether a frame of source ``filename`` is one a warning skips."""
    return filename.startswith(INTERNAL_FOLDERS) and not filename.startswith(APPLICATION_FOLDER)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this name the first frame outside
    :data:`INTERNAL_FOLDERS` (the outermost frame if every frame is inside)."""
    frame = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame.f_back is not None and internal(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    return level
