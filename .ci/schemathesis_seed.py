"""Creates the records schemathesis's generated requests refer to and prints their ids as JSON.

Usage: schemathesis_seed.py <base url> <admin token>
"""

import json
import sys
import urllib.request


def call(base, token, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + token)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request) as response:
        return json.load(response)["result"]


def main():
    base, admin = sys.argv[1], sys.argv[2]
    model = call(base, admin, "POST", "/api/v1/deviceModels", {
        "name": "schemathesis model",
        "deviceType": "Crane",
        "attributesMap": {
            "temp": {"dataType": "Float", "readable": "RW"},
            "label": {"dataType": "String", "readable": "R", "channel": "w"},
        },
        "actionsMap": {"reset": {"paramsMap": {"hard": {"type": "Boolean", "required": True}}}},
    })
    project = call(base, admin, "POST", "/api/v1/projects", {"name": "schemathesis project"})
    device = call(base, admin, "POST", "/api/v1/devices", {
        "deviceName": "schemathesis device", "projectId": project["id"], "modelId": model["id"],
    })
    event = call(base, admin, "POST", "/api/v1/deviceEvents", {
        "deviceId": device["id"], "attributeCode": "temp", "attributeData": 21.5,
    })
    route = call(base, admin, "POST", f"/api/v1/devices/{device['id']}/routes", {"sourceType": "APP"})
    tenant = call(base, admin, "POST", "/api/v1/tenants", {"name": "schemathesis tenant"})
    json.dump({
        "model": model["id"],
        "project": project["id"],
        "device": device["id"],
        "event": event["meta"]["id"],
        "route": route["id"],
        "tenant": tenant["id"],
    }, sys.stdout)


if __name__ == "__main__":
    main()
