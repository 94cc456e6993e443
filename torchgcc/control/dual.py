"""The dual variable (virtual queue) that prices straggler events against a long-run budget."""

from __future__ import annotations

from typing import Any

from torchgcc.checks import check_real

__all__ = ["DualVariable"]


class DualVariable:
    """``lambda_{t+1} = max(0, lambda_t + eta * (event_t - budget))``: a virtual queue of excess events.

    Summing the update gives the guarantee the controllers rely on: after ``T`` steps the event rate is at most
    ``budget + (lambda_T - lambda_0) / (eta * T)``, whatever the choices were, so the rate converges to the budget
    whenever ``lambda`` stays bounded (it does once the penalty ``lambda * P(event)`` outweighs the utility gain
    of the riskier sizes).

    Args:
        budget: the allowed long-run event rate epsilon, in ``[0, 1)``.
        eta: step size of the update, > 0.
        value: the initial lambda, >= 0.
    """

    def __init__(self, budget: float, *, eta: float = 1.0, value: float = 0.0) -> None:
        self.budget = check_real("budget", budget, low=0, high=1, high_open=True)
        self.eta = check_real("eta", eta, low=0, low_open=True)
        self.value = check_real("value", value, low=0)

    def update(self, event: bool | float) -> float:
        """Apply one step with the observed ``event`` and return the new lambda.

        ``event`` is a ``bool`` or a number in ``[0, 1]`` (1 or 0; a fraction is allowed); anything else (NaN, 7,
        a string) raises, since a NaN would silently reset lambda to 0 (``max(0, nan)`` is 0) and a value above 1
        would overcharge the budget.
        """
        step = float(event) if isinstance(event, bool) else check_real("event", event, low=0, high=1)
        self.value = max(0.0, self.value + self.eta * (step - self.budget))
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "eta": self.eta, "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.budget, self.eta, self.value = float(state["budget"]), float(state["eta"]), float(state["value"])

    def __repr__(self) -> str:
        return f"DualVariable(budget={self.budget}, eta={self.eta}, value={self.value:.4g})"
