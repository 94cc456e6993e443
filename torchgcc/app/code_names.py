"""The command lines' code names: ``uncoded``, ``replication`` or any registered code, optionally ``CODE:S=4`` or
``CODE:adaptive``, mapped to a code and the rule that ends its wait.

Every name is a :func:`torchgcc.make_code` code on the same N workers: ``uncoded`` groups N samples (N = K), the
others K. ``uncoded`` and ``replication`` wait until they can decode (every worker; a copy of every input); a code
waits for the fastest ``N - S`` of the run, or its own ``:S=s``, or the S a wait-count controller chooses per step
(``:adaptive``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torchgcc
from torchgcc.codes import Code
from torchgcc.workers import WaitPolicy

__all__ = ["BASELINES", "NamedCode", "code_name_choices", "named_code"]

#: The names whose wait ends as soon as they can decode (they have no S).
BASELINES = ("uncoded", "replication")


@dataclass
class NamedCode:
    """A code as the command line names it.

    Attributes:
        name: the name given (``"gcc:S=4"``), reported in the records.
        code: the code.
        wait: the rule that ends its rounds' wait.
    """

    name: str
    code: Code
    wait: WaitPolicy


def code_name_choices() -> list[str]:
    """Every base name (without ``:S=...`` or ``:adaptive``)."""
    return torchgcc.list_codes()


def named_code(
    name: str,
    *,
    num_inputs: int,
    num_workers: int,
    num_stragglers: int,
    deadline_s: Optional[float] = None,
    timeout_s: float = 30.0,
    controller: Optional[Callable[[], Any]] = None,
    watch_s: Optional[float] = None,
    code_params: Optional[dict] = None,
) -> NamedCode:
    """The :class:`NamedCode` of ``name`` (raises ``ValueError`` naming the option for a bad name).

    Args:
        name: ``"uncoded"``, ``"replication"``, a registered code, ``"CODE:S=4"`` or ``"CODE:adaptive"``.
        num_inputs, num_workers, num_stragglers: the run's K, N and S.
        deadline_s, timeout_s: the wait's deadline and timeout.
        controller: builds the wait-count controller of an ``:adaptive`` name (None: adaptive names are refused).
        watch_s: seconds an adaptive round records late arrivals.
        code_params: keyword arguments of :func:`torchgcc.make_code` for the codes (not the baselines).
    """
    base, _, option = name.partition(":")
    if base not in code_name_choices():
        raise ValueError(f"--scheme: unknown name {base!r}; choose from {code_name_choices()}")
    stragglers: Optional[int] = num_stragglers
    adaptive = None
    if option == "adaptive":
        if controller is None or base in BASELINES:
            raise ValueError(f"--scheme {name}: adaptive needs a code (not {BASELINES}) and --wait-deadline SECONDS")
        adaptive = controller()
    elif option:
        key, _, value = option.partition("=")
        if key != "S" or not value.isdigit() or base in BASELINES:
            raise ValueError(f"--scheme: bad name {name!r}: a code may carry its S as e.g. 'gcc:S=4'")
        stragglers = int(value)
        if stragglers >= num_workers:
            raise ValueError(f"--scheme {name}: S={stragglers} leaves no worker out of N={num_workers}")
    if base in BASELINES:
        stragglers = None
        k = num_workers if base == "uncoded" else num_inputs
        code = torchgcc.make_code(base, num_inputs=k, num_workers=num_workers)
    else:
        code = torchgcc.make_code(base, num_inputs=num_inputs, num_workers=num_workers, **(code_params or {}))
    code.decoder.warm_up()  # a kernel's first-use compile belongs to the setup, not to the first timed step
    wait = WaitPolicy(
        stragglers, deadline_s=deadline_s, timeout_s=timeout_s, adaptive=adaptive, watch_s=watch_s if adaptive else None
    )
    return NamedCode(name, code, wait)
