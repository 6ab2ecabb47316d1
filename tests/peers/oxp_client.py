"""The official OXP Python client against the gateway (base URL argv[1]).

Prints one JSON object: what list-tools and call-tool returned, and the
status codes of the error cases.
"""
import json
import sys

import oxp

client = oxp.Oxp(base_url=sys.argv[1], bearer_token="unused-by-a-gateway-without-auth")
out = {}
listing = client.tools.list()
out["ids"] = sorted(item.id for item in listing.items)
result = client.tools.call(request={"tool_id": "Math.add@1.0.0", "input": {"a": 2, "b": 40}})
out["call"] = result.to_dict() if hasattr(result, "to_dict") else json.loads(result.json())
for name, request in [
    ("unknown", {"tool_id": "Math.nothing@1.0.0", "input": {}}),
    ("invalid", {"tool_id": "Math.add@1.0.0", "input": {"a": "two", "b": 40}}),
]:
    try:
        client.tools.call(request=request)
        out[name] = 200
    except oxp.APIStatusError as e:
        out[name] = e.status_code
print(json.dumps(out))
