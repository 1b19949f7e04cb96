"""The provider: the outcomes it answers as values, the OpenAI adapter, and the local simulator."""
