"""TCP ports: the one rule for what a port number may be, for every server address pysonic reads."""

from ._errors import ConfigurationError

PORT_RANGE = (1, 65535)  # TCP ports; 0 means "any free port" only where a caller says so


def check_port(port: int, what: str) -> int:
    """``port`` if it is a TCP port (1-65535), else ConfigurationError naming ``what``.

    A number beyond 65535 is not silently taken modulo 65536 (gRPC's parser does that:
    ``:117611`` would dial port 52075).
    """
    low, high = PORT_RANGE
    if not low <= port <= high:
        raise ConfigurationError(f"{what}: {port} is not a TCP port ({low}-{high})")
    return port
