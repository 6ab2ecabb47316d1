"""The official OXP Python client (PyPI `oxp`) against the gateway.

    oxp_client.py BASE_URL OK_TOOL_ID FAILING_TOOL_ID

Prints one JSON object on stdout: what health, list-tools and call-tool gave
back through the client's own models, and for the error cases the exception
the client raised, its status and the body it parsed.
"""
import json
import sys

import oxp

base_url, ok_id, failing_id = sys.argv[1], sys.argv[2], sys.argv[3]
# The client insists on a bearer token; a gateway without [auth] ignores it.
# No retries: a 5xx must show up here, not be hidden by a second attempt.
client = oxp.Oxp(base_url=base_url, bearer_token="client-secret-token", max_retries=0, timeout=10)
out = {}

client.health.check()  # raises on anything but 2xx
out["health"] = "ok"

listing = client.tools.list()
out["list_schema"] = listing.schema_
out["tools"] = sorted(
    ({"id": t.id, "name": t.name, "version": t.version, "input_schema": t.input_schema} for t in listing.items),
    key=lambda t: t["id"],
)

ok = client.tools.call(
    schema="urn:oxp:1.0",
    request={
        "tool_id": ok_id,
        "call_id": "oxp-call-1",
        "trace_id": "oxp-trace-1",
        "input": {"a": 2, "b": 40},
    },
)
out["call"] = {"type": type(ok.result).__name__, "body": ok.to_dict()}

failed = client.tools.call(request={"tool_id": failing_id, "input": {}})
out["failure"] = {"type": type(failed.result).__name__, "body": failed.to_dict()}

for name, request in [
    ("unknown", {"tool_id": "Nowhere.nothing@1.0.0", "input": {}}),
    ("invalid", {"tool_id": ok_id, "input": {"a": "two"}}),
]:
    try:
        answer = client.tools.call(request=request)
        out[name] = {"status": 200, "body": answer.to_dict()}
    except oxp.APIStatusError as e:
        out[name] = {"status": e.status_code, "exception": type(e).__name__, "body": e.body}

print(json.dumps(out))
