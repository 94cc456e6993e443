"""What the process tests ask of the operating system (Linux's /proc), in one place."""

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running: it exists and is not a zombie. A process that exits while its ``stat`` is
    read is gone too (the read then raises ``ProcessLookupError``)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
