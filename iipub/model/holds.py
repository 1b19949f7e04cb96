"""Holds that fit the cause, as values (pure): a product's creates held (`ProductHold`: a refused
parameter, a request too large for the tokens-per-minute limit) or a model's (`ModelHold`: no
access to it, no such model), and the line `status` shows for each. `money.holds` decides when
they are placed and lifted; `store.product_holds` and `store.model_holds` write them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

# Why a product's creates are held (`ProductHold.cause`).
PARAMETER, TOO_LARGE = "parameter", "too_large"
# Why a model's creates are held (`ModelHold.cause`).
NO_ACCESS, NO_SUCH_MODEL = "no_access", "unknown"


@dataclass(frozen=True)
class ProductHold:
    """One product's creates held, until its request changes (`holds`): the provider refused a
    parameter of it, or found it larger than the organization's tokens-per-minute limit."""

    product: str
    request_fingerprint: str
    param: str | None
    code: str | None
    message: str | None
    job_id: str | None
    held_at: dt.datetime
    cause: str = PARAMETER
    cap: int | None = None  # too_large: the max_output_tokens the refused create sent
    limit: int | None = None  # too_large: the tokens-per-minute limit the API gave
    requested: int | None = None  # too_large: the tokens the API said the create asked for

    def describe(self) -> str:
        since = f"since {self.held_at.isoformat(timespec='seconds')}Z"
        if self.cause == TOO_LARGE:
            limit = f"{self.limit:,}" if self.limit is not None else "not given"
            asked = f", requested {self.requested:,}" if self.requested is not None else ""
            cap = f"{self.cap:,}" if self.cap is not None else "its cap"
            return (f"creates of {self.product} held: a create (max_output_tokens {cap}) is larger than the "
                    f"organization's tokens-per-minute limit (the API's limit {limit}{asked}; {since}); lower "
                    f"the product's max_output_tokens, ask for fewer items or languages, or move to a higher rate "
                    f"tier and set [provider] tokens_per_minute: its creates resume once its request changes")
        code = f", {self.code}" if self.code else ""
        return (f"creates of {self.product} held: the provider refuses parameter {self.param!r}{code} "
                f"({since}); fix the product's configuration and its creates resume")


@dataclass(frozen=True)
class ModelHold:
    """A model's creates held, for every product on it: the project may not use it, or it does
    not exist (`holds`). Placed under the scope the refusal came from; a read of the models
    endpoint (free) that finds it usable lifts it, and so does another scope."""

    model: str
    scope: str
    cause: str
    message: str | None
    job_id: str | None
    held_at: dt.datetime
    checked_at: dt.datetime

    def describe(self, products: tuple[str, ...] = (), project: str | None = None) -> str:
        on = f" ({', '.join(products)})" if products else ""
        where = f"project {project}" if project else "the key's project"
        since = f"since {self.held_at.isoformat(timespec='seconds')}Z"
        if self.cause == NO_SUCH_MODEL:
            what, remedy = (f"model {self.model} does not exist for {where}",
                            "correct the products' model (a retired or misspelled name)")
        else:
            what = f"{where} has no access to model {self.model}"
            remedy = ("allow the model in the project's limits (model usage), or move the products to a model "
                      "the project may use")
        return (f"creates of {self.model}{on} held: {what} ({since}); {remedy}; `iipub doctor` checks it free of "
                f"charge, and creates resume by themselves once the models endpoint answers for it")
