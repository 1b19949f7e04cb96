"""The provider's webhooks, received: verification, custody, and the standalone server."""
