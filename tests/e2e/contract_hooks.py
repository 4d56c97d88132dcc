"""schemathesis hooks for berth's contract test (tests/e2e/contract.rs).

A create request's schema states every rule JSON Schema can express (launcher::schema). One
rule it cannot: shared memory at most the memory asked for (two sizes, each bytes or text with
a unit). Bodies that break it are not generated, so a 422 for anything else is a failure.
"""

import re

import schemathesis

UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kKmMgGtT]?)[iI]?[bB]?")


def size(value):
    """Bytes, as launch::ByteSize reads them; None for what it would refuse."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    found = SIZE.fullmatch(value.strip())
    if not found:
        return None
    return int(float(found.group(1)) * UNITS[found.group(2).lower()])


@schemathesis.hook
def filter_body(context, body):
    operation = context.operation
    if operation is None or not isinstance(body, dict):
        return True
    if (operation.method.upper(), operation.path) != ("POST", "/v1/sessions"):
        return True
    resources = body.get("resources")
    if not isinstance(resources, dict) or "shared_memory" not in resources:
        return True
    memory, shared = size(resources.get("memory")), size(resources.get("shared_memory"))
    # Without `memory`, a preset's memory bounds it, which the generator cannot know.
    return memory is not None and shared is not None and shared <= memory
