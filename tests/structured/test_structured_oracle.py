# Oracle test of constrained generation (structured outputs): 200+ JSON schemas (real function-calling schemas plus seeded random ones),
# regexes and choices are compiled by build/bin/structured_walk against real vocabularies and walked at random
# through the token masks; every finished output must validate with Python's `jsonschema` (formats checked),
# fullmatch its regex with Python's `re`, or be one of the choices. Refused schemas must name the keyword.
import json
import pathlib
import random
import re
import subprocess

import jsonschema
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent

# --- real function-calling schemas (OpenAI tools' `parameters`, strict-mode style) ---
FUNCTION_SCHEMAS = [
    {"type": "object", "properties": {"location": {"type": "string", "description": "City and country"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["location", "unit"], "additionalProperties": False},
    {"type": "object", "properties": {"query": {"type": "string", "maxLength": 40},
                                      "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
     "required": ["query"], "additionalProperties": False},
    {"type": "object", "properties": {"to": {"type": "string", "format": "email"},
                                      "cc": {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": 3},
                                      "subject": {"type": "string", "maxLength": 20}, "body": {"type": "string", "maxLength": 30}},
     "required": ["to", "subject", "body"], "additionalProperties": False},
    {"type": "object", "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 20},
                                      "start": {"type": "string", "format": "date-time"},
                                      "duration_minutes": {"type": "integer", "minimum": 5, "maximum": 480},
                                      "attendees": {"type": "array", "items": {"type": "string", "format": "email"},
                                                    "minItems": 1, "maxItems": 3}},
     "required": ["title", "start", "attendees"], "additionalProperties": False},
    {"type": "object", "properties": {"ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"},
                                      "period": {"enum": ["1d", "5d", "1mo", "1y"]}},
     "required": ["ticker", "period"], "additionalProperties": False},
    {"type": "object", "properties": {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                      "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                      "date": {"type": "string", "format": "date"},
                                      "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
                                      "cabin": {"type": "string", "enum": ["economy", "premium", "business", "first"]}},
     "required": ["origin", "destination", "date", "passengers", "cabin"], "additionalProperties": False},
    {"type": "object", "properties": {"time": {"type": "string", "format": "time"}, "text": {"type": "string", "maxLength": 25}},
     "required": ["time", "text"], "additionalProperties": False},
    {"type": "object", "properties": {"path": {"type": "string", "pattern": "^(/[a-z0-9_.-]+)+$"},
                                      "mode": {"enum": ["r", "w", "a"]}, "create": {"type": "boolean"}},
     "required": ["path", "mode"], "additionalProperties": False},
    {"type": "object", "properties": {
        "table": {"type": "string", "enum": ["users", "orders"]},
        "filters": {"type": "array", "maxItems": 3, "items": {
            "type": "object", "properties": {"column": {"type": "string", "maxLength": 10},
                                             "op": {"enum": ["=", "<", ">", "like"]},
                                             "value": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "number"},
                                                                 {"type": "null"}]}},
            "required": ["column", "op", "value"], "additionalProperties": False}},
        "limit": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000}},
     "required": ["table", "filters", "limit"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                                         "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                      "maxItems": 2}},
                        "required": ["name", "children"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"value": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
     "required": ["value", "next"], "additionalProperties": False},
    {"type": "object", "properties": {"shape": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "radius": {"type": "number", "minimum": 0}},
         "required": ["kind", "radius"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number", "minimum": 0, "maximum": 100},
                                          "h": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10}},
         "required": ["kind", "w", "h"], "additionalProperties": False}]}},
     "required": ["shape"], "additionalProperties": False},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "ip": {"type": "string", "format": "ipv4"},
                                      "tags": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}}},
     "required": ["id", "ip", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"type": "string"}, "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                                      "sources": {"type": "array", "items": {"type": "string", "maxLength": 12}}},
     "required": ["answer", "confidence"], "additionalProperties": False},
    {"type": "object", "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
        "type": "object", "properties": {"explanation": {"type": "string", "maxLength": 15}, "output": {"type": "string", "maxLength": 10}},
        "required": ["explanation", "output"], "additionalProperties": False}}, "final_answer": {"type": "string", "maxLength": 10}},
     "required": ["steps", "final_answer"], "additionalProperties": False},
    {"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
     "required": ["name", "arguments"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"name": {"enum": ["get_weather", "search"]},
                                                                  "parameters": {"type": "object"}},
                                "required": ["name", "parameters"], "additionalProperties": False}, "minItems": 1},
    {"type": "object", "properties": {"temperature": {"type": "integer", "minimum": -40, "maximum": 55},
                                      "offset": {"type": "integer", "minimum": -1000000, "maximum": -17},
                                      "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                                      "big": {"type": "integer", "minimum": 99999}},
     "required": ["temperature", "offset", "year", "big"], "additionalProperties": False},
    {"type": "object", "properties": {"emoji": {"type": "string", "pattern": "^[😀-😏é€]{1,3}$"},
                                      "quote": {"type": "string", "pattern": "^say \"[a-z]+\"\\.$"}},
     "required": ["emoji", "quote"], "additionalProperties": False},
    {"type": "object", "properties": {"note": {"type": ["string", "null"], "maxLength": 6}, "flag": {"type": ["boolean", "integer"]}},
     "required": ["note", "flag"], "additionalProperties": False},
    {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 5}},
     "required": ["id"], "additionalProperties": {"type": "boolean"}},
    {"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": True},
    {"type": "object", "properties": {"url": {"type": "string", "format": "uri"}, "host": {"type": "string", "format": "hostname"}},
     "required": ["url", "host"], "additionalProperties": False},
]

SCALARS = [
    lambda r: {"type": "string", "maxLength": r.randint(0, 12)},
    lambda r: {"type": "string", "minLength": r.randint(1, 3), "maxLength": r.randint(3, 8)},
    lambda r: {"type": "string"},
    lambda r: {"type": "integer"},
    lambda r: (lambda lo: {"type": "integer", "minimum": lo, "maximum": lo + r.choice([0, 1, 9, 99, 12345])})(r.randint(-500, 500)),
    lambda r: {"type": "integer", "exclusiveMinimum": r.randint(-20, 20)},
    lambda r: {"type": "integer", "maximum": r.randint(-30, 30)},
    lambda r: {"type": "number"},
    lambda r: (lambda lo: {"type": "number", "minimum": lo, "maximum": lo + r.randint(0, 20)})(r.randint(-10, 10)),
    lambda r: {"type": "boolean"},
    lambda r: {"type": "null"},
    lambda r: {"enum": r.sample(["a", "b c", "ü", 1, 2.5, True, None, "with \"quote\"", "x\\y"], r.randint(1, 4))},
    lambda r: {"const": r.choice(["fixed", 42, False, None, [1, 2], {"k": "v"}])},
    lambda r: {"type": "string", "format": r.choice(["date", "time", "date-time", "uuid", "email", "ipv4", "hostname", "uri"])},
    lambda r: {"type": "string", "pattern": r.choice(["^[a-z]{2,4}$", "^\\d{3}-\\d{2}$", "^(yes|no)$", "^[A-F0-9]+$",
                                                     "^\\w+@\\w+\\.com$", "^[^\"\\\\]{1,3}$", "^a\\tb\\n?$"])},
    lambda r: {"type": r.sample(["string", "integer", "null", "boolean"], 2)},
]


def random_schema(r: random.Random, depth: int) -> dict:
    roll = r.random()
    if depth <= 0 or roll < 0.45:
        return r.choice(SCALARS)(r)
    if roll < 0.7:
        names = r.sample(["id", "name", "value", "items", "meta", "ok", "count", "when", "tag", "x", "y", "z", "note",
                          "a b", "ünï", "quote\"d"], r.randint(0, 6))
        props = {n: random_schema(r, depth - 1) for n in names}
        required = [n for n in names if r.random() < 0.5]
        extra = r.choice([False, False, False, True, {"type": "integer", "maximum": 9}])
        return {"type": "object", "properties": props, "required": required, "additionalProperties": extra}
    if roll < 0.85:
        s = {"type": "array", "items": random_schema(r, depth - 1)}
        if r.random() < 0.5:
            s["minItems"] = r.randint(0, 2)
        if r.random() < 0.7:
            s["maxItems"] = s.get("minItems", 0) + r.randint(0, 3)
        return s
    return {"anyOf": [random_schema(r, depth - 1) for _ in range(r.randint(1, 3))]}


def schemas() -> list:
    r = random.Random(1234)
    out = list(FUNCTION_SCHEMAS)
    while len(out) < 220:
        s = random_schema(r, 3)
        if r.random() < 0.6:  # most top levels are objects, as with tools and response formats
            s = {"type": "object", "properties": {"result": s, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
                 "required": ["result"], "additionalProperties": False}
        out.append(s)
    return out


REGEXES = [r"\d{3}-\d{4}", r"[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8})?", r"(cat|dog|bird)s?", r"0x[0-9a-fA-F]{1,8}",
           r"^\w+@\w+\.(com|org)$", r"[^\s]{1,5}\s[^\s]{1,5}", r"(?:ab|cd)*?e", r"\(\d+\)\.\*",
           r"[\u00e9\u20ac-\u20ae]{2}x", r"(?P<h>[01]\d|2[0-3]):[0-5]\d", r"-?\d+(\.\d{1,2})?", r"a{2,}b{,2}c{3}",
           r"[^a-z\d]{1,4}", r".{1,3}!", r"\D\W\S", r"[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?"]
CHOICES = [["yes", "no"], ["positive", "negative", "neutral"], ["A", "AB", "ABC"], ["é", "ü ö", "日本"],
           ["one two", "one", "two"]]
REFUSED = [({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}, "multipleOf"),
           ({"type": "string", "format": "hostname-x"}, "format"),
           ({"type": "array", "prefixItems": [{"type": "string"}]}, "prefixItems"),
           ({"type": "object", "minProperties": 1}, "minProperties"),
           ({"not": {"type": "string"}}, "not")]


def run_walker(tmp_path: pathlib.Path, vocab: dict, cases: list, walks: int, seed: int) -> list:
    walker = ROOT / "build" / "bin" / "structured_walk"
    if not walker.exists():
        pytest.fail(f"{walker} is missing: build the structured_walk target")
    cfg = dict(vocab, seed=seed, walks=walks, max_tokens=400, cases=cases)
    (tmp_path / "in.json").write_text(json.dumps(cfg))
    subprocess.run([str(walker), str(tmp_path / "in.json"), str(tmp_path / "out.json")], check=True, timeout=300)
    return json.loads((tmp_path / "out.json").read_text())


def check(cases: list, results: list) -> int:
    finished = 0
    validator_cls = jsonschema.Draft202012Validator
    for case, res in zip(cases, results):
        assert "error" not in res, f"{case}: {res.get('error')}"
        for out in res["outputs"]:
            if not out["finished"]:
                continue
            finished += 1
            text = out["text"]
            if case["kind"] == "json_schema":
                value = json.loads(text)
                validator_cls(json.loads(case["text"]), format_checker=validator_cls.FORMAT_CHECKER).validate(value)
            elif case["kind"] == "json_object":
                assert isinstance(json.loads(text), dict), text
            elif case["kind"] == "regex":
                assert re.fullmatch(case["text"], text), (case["text"], text)
            elif case["kind"] == "choice":
                assert text in json.loads(case["text"]), text
    return finished


@pytest.mark.parametrize("vocab_name", ["tinyllama-1.1b-chat-v1.0", "phi-2"])
def test_random_walks_validate(tmp_path, testdata, vocab_name):
    all_schemas = schemas()
    assert len(all_schemas) >= 200
    # Every format the converter generates is checked (jsonschema skips a format whose checker is not installed).
    checkers = jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers
    assert {"date", "time", "date-time", "uuid", "email", "ipv4", "hostname", "uri"} <= set(checkers)
    # Both vocabularies see the function-calling schemas; the random ones are split between them to keep CI fast.
    picked = FUNCTION_SCHEMAS + all_schemas[len(FUNCTION_SCHEMAS):][vocab_name == "phi-2"::2]
    cases = [{"kind": "json_schema", "text": json.dumps(s)} for s in picked]
    cases += [{"kind": "json_object"}]
    cases += [{"kind": "regex", "text": p} for p in REGEXES]
    cases += [{"kind": "choice", "text": json.dumps(c, ensure_ascii=False)} for c in CHOICES]
    results = run_walker(tmp_path, {"tokenizer": str(testdata / "tokenizers" / vocab_name)}, cases, walks=3, seed=7)
    assert len(results) == len(cases)
    finished = check(cases, results)
    total = sum(len(r["outputs"]) for r in results)
    assert finished >= 0.8 * total, f"only {finished} of {total} walks finished under the token cap"


def test_refused_schemas_name_the_keyword(tmp_path, testdata):
    cases = [{"kind": "json_schema", "text": json.dumps(s)} for s, _ in REFUSED]
    results = run_walker(tmp_path, {"tokenizer": str(testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0")}, cases, 1, 1)
    for (schema, keyword), res in zip(REFUSED, results):
        assert "error" in res, schema
        assert keyword in res["error"], res["error"]


def test_checker_rejects_bad_outputs():
    # The oracle itself can fail: an output outside its schema, regex or choice list is caught.
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}
    cases = [{"kind": "json_schema", "text": json.dumps(schema)}, {"kind": "regex", "text": r"\d+"},
             {"kind": "choice", "text": json.dumps(["a", "b"])}]
    for i, bad in enumerate(['{"d":"2023-02-30"}', "12a", "c"]):
        results = [{"outputs": [{"text": "", "finished": False}]} for _ in cases]
        results[i] = {"outputs": [{"text": bad, "finished": True}]}
        with pytest.raises((AssertionError, jsonschema.ValidationError)):
            check(cases, results)
