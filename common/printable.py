"""Text bound for a terminal: nothing in it may drive the terminal.

Memory files, model replies and search snippets can hold escape sequences (a group member's
message appended to the daily log, a model echoing one): printed raw they could recolour, hide or
rewrite what the owner sees, or set the window title. `printable` is applied to all of it.
"""

from __future__ import annotations

import re

# ESC-introduced sequences (CSI, OSC up to BEL or ST, and two-byte escapes), C1 CSI/OSC forms, and
# every other C0/C1 control character except newline and tab. Bidirectional overrides go too:
# they make text read differently from what it is.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI … final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC … BEL or ST
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS, PM, APC, SOS strings
    r"|\x1b[ -/]*[0-~]"  # two-byte and nF escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # C1 CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` without escape sequences and control characters; newlines and tabs are kept.

    Safe on a stream cut into pieces: a sequence split across two pieces loses its ESC, so what
    remains prints as plain characters."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))
