"""The WSGI entry point PRODUCT.md names, `iipub.webhook:application` (gunicorn, mod_wsgi): the
receiver lives in `iipub.webhooks.receiver`; this module only gives it its published address."""

from iipub.webhooks.receiver import application

__all__ = ["application"]
