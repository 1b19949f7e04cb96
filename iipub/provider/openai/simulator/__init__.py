"""A local stand-in for the Responses API: real HTTP, the SDK's wire shapes, injectable faults.

`Simulator(SimulatorOptions(...)).start()` serves on a loopback port; point OPENAI_BASE_URL at
`sim.url`. It counts every request it receives, so a test can prove how many paid creates
happened. With `webhook_url` and `webhook_secret` it also sends OpenAI's signed webhooks when
background responses finish. `iipub simulator` runs the same server from the command line.
"""

from typing import TYPE_CHECKING, Any

from iipub.provider.openai.simulator.faults import (
    CONTENT_FAULTS,
    DESCRIPTIONS,
    EXCHANGE_FAULTS,
    FAULTS,
    OPS,
    WEBHOOK_FAULTS,
    WEBHOOK_OP,
    FaultRule,
    parse_fault_spec,
    rule_from_dict,
)

if TYPE_CHECKING:
    from iipub.provider.openai.simulator.server import Simulator, SimulatorOptions, is_loopback

_LAZY = frozenset({"Simulator", "SimulatorOptions", "is_loopback"})


def __getattr__(name: str) -> Any:
    # The HTTP server (and httpx, for its webhooks) load only when a simulator is wanted: the
    # CLI imports the fault catalogue for its help text on every command.
    if name in _LAZY:
        from iipub.provider.openai.simulator import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CONTENT_FAULTS",
    "DESCRIPTIONS",
    "EXCHANGE_FAULTS",
    "FAULTS",
    "OPS",
    "WEBHOOK_FAULTS",
    "WEBHOOK_OP",
    "FaultRule",
    "Simulator",
    "SimulatorOptions",
    "is_loopback",
    "parse_fault_spec",
    "rule_from_dict",
]
