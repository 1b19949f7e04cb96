"""Everything that is OpenAI's: the adapter over the Responses API, its codes and model table,
webhook verification and the simulator."""
