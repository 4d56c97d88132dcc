"""schemathesis hooks for berth's contract test (tests/e2e/contract.rs).

A create request's schema states every rule JSON Schema can express (launcher::schema). One
rule it cannot: shared memory at most the memory asked for (two sizes, each bytes or text with
a unit). The admin endpoints have a few more (`_admin_rules`), and a webhook's URL one: its
host, written as an address, must be one the operator admits (`BERTH_WEBHOOK_ALLOW`; the
test's gateway admits none of the special ranges). Bodies that break them are not generated,
so a 422 for anything else is a failure.
"""

import re
from datetime import datetime, timedelta, timezone

import schemathesis
from hypothesis import strategies as st

# A resumable upload's bytes (`PATCH /v1/uploads/{token}`) are a media type of tus's own:
# any bytes.
schemathesis.openapi.media_type("application/offset+octet-stream", st.binary(max_size=64))

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


def written_as_address(url):
    """Whether the host of `url` is an IP address as a URL parser (WHATWG's, which berth's
    url crate follows) reads one: `[...]`, or a name whose last label is a number
    (`127.0.0.1`, `2130706433`, `0x7f.1`, `000...0`). Such a host may be a special address,
    which berth refuses unless the operator admits it, a rule no schema states."""
    if not isinstance(url, str) or "://" not in url:
        return False
    host = re.split(r"[/?#]", url.split("://", 1)[1], maxsplit=1)[0].rsplit("@", 1)[-1]
    if host.startswith("["):
        return True
    name, _, port = host.rpartition(":")
    if name and port.isdigit():
        host = name
    labels = host.rstrip(".").split(".")
    last = labels[-1].lower() if labels else ""
    return bool(re.fullmatch(r"[0-9]+|0x[0-9a-f]*", last))


def bytes_of(value):
    """A size as the API reads it (a number of bytes, or a string like `256m`), or None when
    it is not one this reads."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"([0-9]+)([kmgt]?)", value.strip().lower())
    if not m:
        return None
    return int(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " ")


@schemathesis.hook
def filter_case(context, case):
    """The admin endpoints' rules between fields: idle checks name exactly one of a group and
    a policy, and a utilization checker at least one threshold; a preset's shared memory is at
    most its memory; a key's expiry is given at most one way, and a date of it lies within the
    next ten years; an endpoint's autoscaling keeps `min_replicas` at most `max_replicas`. A case hook, so that the coverage phase's cases are held to them too."""
    # An email in a path is printable ASCII by its pattern; schemathesis has sent one holding
    # U+FFFD (a character it could not encode, replaced), which the pattern excludes.
    email = (case.path_parameters or {}).get("email")
    if isinstance(email, str) and not all("!" <= c <= "~" for c in email):
        return False
    where = (case.operation.method.upper(), case.operation.path)
    # A followed event stream never ends, which a check of a request and its answer cannot
    # read to the end: only streams that end at the log's end are tried.
    if where in (("GET", "/v1/events"), ("GET", "/v1/subscriptions/{name}/events")):
        follow = (case.query or {}).get("follow")
        return follow is False or follow == "false"
    body = case.body
    if not isinstance(body, dict):
        return True
    if where == ("PUT", "/v1/notifications/webhook"):
        return not written_as_address(body.get("url"))
    # An endpoint's autoscaling keeps its lower bound at or below its upper one.
    if where == ("PUT", "/v1/services/{id}/autoscaling"):
        low, high = body.get("min_replicas"), body.get("max_replicas")
        if isinstance(low, int) and isinstance(high, int) and low > high:
            return False
    if where == ("PUT", "/v1/admin/idle-checks"):
        named = [body.get(k) for k in ("resource_group", "resource_policy")]
        if sum(n is not None for n in named) != 1:
            return False
        checks = body.get("checks")
        utilization = checks.get("utilization") if isinstance(checks, dict) else None
        if isinstance(utilization, dict):
            thresholds = utilization.get("thresholds")
            if not isinstance(thresholds, dict) or all(v is None for v in thresholds.values()):
                return False
        return True
    if where == ("POST", "/v1/admin/api-keys"):
        at, secs = body.get("expires_at"), body.get("expires_in_secs")
        if at is not None and secs is not None:
            return False
        if isinstance(at, str):
            try:
                when = datetime.fromisoformat(at)
            except ValueError:
                return True
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            now = datetime.now(timezone.utc)
            # A minute's margin each side: the case is sent a little after it is made.
            return now + timedelta(minutes=1) < when < now + timedelta(days=3650) - timedelta(minutes=1)
        return True
    resources = body.get("resources")
    if isinstance(resources, dict) and resources.get("shared_memory") is not None:
        # Wherever a request asks for resources (a session, advice, a fit watch), shared
        # memory it names is held against the memory it asks for.
        if resources.get("memory") is None:
            return True
        memory, shared = (bytes_of(resources.get(k)) for k in ("memory", "shared_memory"))
        # Both named: the case's answer is known only for sizes read here.
        return memory is not None and shared is not None and shared <= memory
    if where == ("POST", "/v1/subscriptions"):
        # Read over NATS, a subscription filters by what subjects can say only: categories,
        # and streams of those categories.
        if body.get("nats") is True:
            if any(body.get(k) is not None for k in ("type", "owner", "resource_group")):
                return False
            stream, category = body.get("stream"), body.get("category")
            if isinstance(stream, str) and isinstance(category, str):
                return stream.split("-", 1)[0] in category.split(",")
            if body.get("session") is not None and isinstance(category, str):
                return "session" in category.split(",")
        return True
    if where == ("PUT", "/v1/admin/presets/{name}"):
        resources = body.get("resources")
        shared = body.get("shared_memory_bytes")
        number = (int, float)
        if isinstance(resources, dict) and isinstance(shared, number) and not isinstance(shared, bool):
            memory = resources.get("memory_bytes")
            return not isinstance(memory, number) or shared <= memory
    return True

