"""specchat: a terminal chat that makes speculative decoding visible."""

__version__ = "0.1.0"
