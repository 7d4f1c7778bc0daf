"""Which addresses a specchat server may listen on: loopback, unless the user says --expose.

The rule is the same for every server specchat starts (rpc-server, serve): none of them has
authentication, so reaching one from another machine is the user's explicit choice.
"""

from __future__ import annotations

import ipaddress

from specchat.errors import SpecchatError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, expose: bool, what: str) -> None:
    """Refuse an address other than loopback unless `expose`; `what` names the server."""
    if not is_loopback(host) and not expose:
        raise SpecchatError(
            f"refusing to serve on {host}: {what} has no authentication. Keep it on 127.0.0.1 "
            "and use an SSH tunnel, or pass --expose if you trust every machine that can reach "
            "this port")
