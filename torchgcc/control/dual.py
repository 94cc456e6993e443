"""The dual variable (virtual queue) that prices straggler events against a long-run budget."""

from __future__ import annotations

from typing import Any

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
        if not 0 <= budget < 1:
            raise ValueError(f"budget must be in [0, 1), got {budget!r}")
        if not eta > 0:
            raise ValueError(f"eta must be > 0, got {eta!r}")
        if not value >= 0:
            raise ValueError(f"the initial lambda must be >= 0, got {value!r}")
        self.budget, self.eta, self.value = float(budget), float(eta), float(value)

    def update(self, event: bool | float) -> float:
        """Apply one step with the observed ``event`` (1 or 0; a fraction is allowed) and return the new lambda."""
        self.value = max(0.0, self.value + self.eta * (float(event) - self.budget))
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "eta": self.eta, "value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.budget, self.eta, self.value = float(state["budget"]), float(state["eta"]), float(state["value"])

    def __repr__(self) -> str:
        return f"DualVariable(budget={self.budget}, eta={self.eta}, value={self.value:.4g})"
