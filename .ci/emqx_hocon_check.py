"""Parses the EMQX settings of deploy/ (EMQX_* variables holding HOCON) with pyhocon, and checks
that they point EMQX's HTTP authentication and authorization at Gantry's /mqtt/auth and
/mqtt/acl with the placeholders Gantry reads. Usage: emqx_hocon_check.py <compose config> <k8s yaml>...
(the compose file as `docker-compose config` prints it, variables resolved)."""

import sys

import yaml
from pyhocon import ConfigFactory


def emqx_envs_of_compose(path):
    with open(path) as f:
        config = yaml.safe_load(f)
    env = config["services"]["emqx"]["environment"]
    # `docker-compose config` writes `$$` for a literal `$`.
    return {k: str(v).replace("$$", "$") for k, v in env.items() if k.startswith("EMQX_")}


def emqx_envs_of_manifest(path):
    envs = {}
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if not doc or doc.get("kind") != "Deployment" or doc["metadata"]["name"] != "emqx":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for var in container.get("env", []):
                    if var["name"].startswith("EMQX_") and "value" in var:
                        envs[var["name"]] = var["value"]
    return envs


def check(where, envs):
    for name in ("EMQX_AUTHENTICATION", "EMQX_AUTHORIZATION__SOURCES"):
        if name not in envs:
            sys.exit(f"{where}: {name} is missing")
    # EMQX reads a variable's value as HOCON; the lists must parse (plain words stay strings).
    parsed = {name: ConfigFactory.parse_string(f"value = {envs[name]}")["value"]
              for name in ("EMQX_AUTHENTICATION", "EMQX_AUTHORIZATION__SOURCES")}
    parsed["EMQX_AUTHORIZATION__NO_MATCH"] = envs.get("EMQX_AUTHORIZATION__NO_MATCH")
    authn = parsed["EMQX_AUTHENTICATION"]
    http = [a for a in authn if a["backend"] == "http"]
    assert len(http) == 1 and http[0]["url"].endswith("/mqtt/auth"), f"{where}: HTTP authentication: {authn}"
    assert dict(http[0]["body"]) == {"clientid": "${clientid}", "username": "${username}", "password": "${password}"}, where
    assert http[0]["headers"]["authorization"].startswith("Bearer "), f"{where}: no bearer token to /mqtt/auth"
    builtin = [a for a in authn if a["backend"] == "built_in_database"]
    assert builtin and authn.index(builtin[0]) < authn.index(http[0]), f"{where}: the nodes' account must come first"
    sources = parsed["EMQX_AUTHORIZATION__SOURCES"]
    assert len(sources) == 1 and sources[0]["type"] == "http" and sources[0]["url"].endswith("/mqtt/acl"), where
    assert dict(sources[0]["body"]) == {"clientid": "${clientid}", "topic": "${topic}", "action": "${action}"}, where
    assert parsed.get("EMQX_AUTHORIZATION__NO_MATCH") == "deny", f"{where}: no_match must be deny"
    print(f"{where}: EMQX settings parse; authentication and authorization ask Gantry")


check(sys.argv[1], emqx_envs_of_compose(sys.argv[1]))
for manifest in sys.argv[2:]:
    check(manifest, emqx_envs_of_manifest(manifest))
