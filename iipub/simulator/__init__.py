"""A local stand-in for the Responses API: real HTTP, the SDK's wire shapes, injectable faults.

`Simulator(SimulatorOptions(...)).start()` serves on a loopback port; point OPENAI_BASE_URL at
`sim.url`. It counts every request it receives, so a test can prove how many paid creates
happened. `iipub simulator` runs the same server from the command line.
"""

from .faults import (
    CONTENT_FAULTS,
    DESCRIPTIONS,
    EXCHANGE_FAULTS,
    FAULTS,
    OPS,
    FaultRule,
    parse_fault_spec,
    rule_from_dict,
)
from .server import Simulator, SimulatorOptions, is_loopback

__all__ = [
    "CONTENT_FAULTS",
    "DESCRIPTIONS",
    "EXCHANGE_FAULTS",
    "FAULTS",
    "OPS",
    "FaultRule",
    "Simulator",
    "SimulatorOptions",
    "is_loopback",
    "parse_fault_spec",
    "rule_from_dict",
]
