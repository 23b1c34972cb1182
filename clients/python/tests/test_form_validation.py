"""gatehouse's check of a form's values against its JSON Schema, compared with the `jsonschema`
package's Draft 2020-12 validator: for generated (schema, values) pairs in the subset a form's
`json_schema` takes (seeded, so every run makes the same pairs), a form gate is opened with the
schema and answered with the values, and gatehouse's accept (202) or reject (400
gate_values_invalid) must be what `jsonschema` says of the same schema with the contract's
documented semantics made explicit: `additionalProperties: false` on every object and
`uniqueItems: true` on every multi-select, formats asserted. The one documented difference, a
null value counting as absent, is left out: no value is ever null.

Formats compared: date, date-time and email (`jsonschema`'s FormatChecker; date-time needs
`rfc3339-validator`). Its email check is only "has an @", so emails are drawn from those every
reading agrees on; date-times leave out what its checker does not support (leap seconds).
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

from conftest import Server

jsonschema = pytest.importorskip("jsonschema")

SEED = 29
PAIRS = 300

#: A property's schema, and a maker of values for it: `maker(rng, bad)` makes a value meant to
#: be valid, or with odds `bad` one drawn from a wider range (valid or not).
Maker = Callable[[random.Random, float], Any]
Kind = Tuple[Dict[str, Any], Maker]

NAMES = ["a", "b", "name", "count", "when", "flag", "tags", "rows", "é", "x y", "target", "n2"]
WORDS = ["red", "green", "blue", "cyan", "x y", "é"]
LETTERS = "abz é😀-_"
#: Each format's values: the valid ones first, then `VALID[format]` of them are valid.
FORMATS = {
    "email": ["ada@example.com", "a.b+c@mail.example.org", "x@y.io", "ada.example.com", "ada at example.com", ""],
    "date": ["2026-12-03", "2024-02-29", "1999-01-31", "2026-02-29", "2026-13-01", "2026-12-3", "20261203",
             "2026-12-03T00:00:00Z", "2026-04-31", "03/12/2026", ""],
    "date-time": ["2026-12-03T10:00:00Z", "2024-02-29T23:59:59.5+05:30", "2026-12-03T10:00:00.123-08:00",
                  "2026-12-03T00:00:00+00:00", "2026-12-03T10:00:00", "2026-12-03T25:00:00Z", "2026-02-30T10:00:00Z",
                  "2026-12-03", "2026-12-03T10:00Z", "2026-12-03T10:00:00+0100", "2026-12-03 10:00:00Z", ""],
}
VALID = {"email": 3, "date": 3, "date-time": 4}
#: Values of the wrong JSON type for most fields (never null).
OTHERS: List[Any] = [7, 2.5, True, False, "7", "", ["a"], {"a": 1}, []]


def maybe(rng: random.Random, p: float = 0.5) -> bool:
    return rng.random() < p


def bounds(rng: random.Random, schema: Dict[str, Any], names: Tuple[str, str], lows: List[Any], highs: List[Any]) -> None:
    """Sets a random lower and upper bound (either may be left out; never low above high)."""
    low, high = rng.choice(lows), rng.choice(highs)
    if low is not None:
        schema[names[0]] = low
    if high is not None and (low is None or high >= low):
        schema[names[1]] = high


def text(rng: random.Random) -> Kind:
    schema: Dict[str, Any] = {"type": "string"}
    bounds(rng, schema, ("minLength", "maxLength"), [None, 0, 1, 2, 3], [None, 2, 4, 8])

    def value(rng: random.Random, bad: float) -> Any:
        if maybe(rng, bad):
            if maybe(rng, 0.3):
                return rng.choice(OTHERS)
            return "".join(rng.choice(LETTERS) for _ in range(rng.randint(0, 9)))
        # Lengths in characters: an emoji is one, as JSON Schema counts.
        low = schema.get("minLength", 0)
        length = rng.randint(low, schema.get("maxLength", low + 6))
        return "".join(rng.choice(LETTERS) for _ in range(length))

    return schema, value


def formatted(rng: random.Random) -> Kind:
    fmt = rng.choice(list(FORMATS))
    values = FORMATS[fmt]

    def value(rng: random.Random, bad: float) -> Any:
        if maybe(rng, bad):
            return rng.choice(OTHERS) if maybe(rng, 0.2) else rng.choice(values)
        return rng.choice(values[: VALID[fmt]])

    return {"type": "string", "format": fmt}, value


def options(rng: random.Random) -> List[str]:
    return rng.sample(WORDS, rng.randint(1, 4))


def select(rng: random.Random) -> Kind:
    choices = options(rng)
    if maybe(rng):
        schema: Dict[str, Any] = {"type": "string", "enum": choices}
    else:
        schema = {"type": "string", "oneOf": [{"const": c, "title": c.title()} for c in choices]}

    def value(rng: random.Random, bad: float) -> Any:
        if maybe(rng, bad):
            return rng.choice(["purple", "RED", "", choices[0].upper() + "!", 7, True, [choices[0]], choices[-1]])
        return rng.choice(choices)

    return schema, value


def number(rng: random.Random) -> Kind:
    integer = maybe(rng)
    schema: Dict[str, Any] = {"type": "integer" if integer else "number"}
    bounds(rng, schema, ("minimum", "maximum"), [None, -3, 0, 1, 0.5], [None, 2, 10, 2.5])
    wide = [0, 1, 2, 3, -4, 10, 11, 2.5, 0.5, 3.0, -0.25, 1e3, 7.0, "3", True, [1]]

    def value(rng: random.Random, bad: float) -> Any:
        if maybe(rng, bad):
            return rng.choice(wide)
        low, high = schema.get("minimum", -5), schema.get("maximum", 12)
        if integer:
            whole = rng.randint(int(-(-low // 1)), int(high // 1))
            # 3.0 is an integer too, in JSON Schema and in gatehouse.
            return float(whole) if maybe(rng, 0.2) else whole
        return round(rng.uniform(low, high), 2) if maybe(rng, 0.7) else rng.choice([low, high])

    return schema, value


def boolean(rng: random.Random) -> Kind:
    def value(rng: random.Random, bad: float) -> Any:
        return rng.choice(["true", 1, 0, "false"]) if maybe(rng, bad) else maybe(rng)

    return {"type": "boolean"}, value


def multi_select(rng: random.Random) -> Kind:
    choices = options(rng)
    if maybe(rng):
        items: Dict[str, Any] = {"type": "string", "enum": choices}
    else:
        items = {"anyOf": [{"const": c, "title": c.title()} for c in choices]}
    schema: Dict[str, Any] = {"type": "array", "items": items}
    bounds(rng, schema, ("minItems", "maxItems"), [None, 0, 1, 2], [None, 1, 2, 3])
    if maybe(rng):
        schema["uniqueItems"] = True

    def value(rng: random.Random, bad: float) -> Any:
        if maybe(rng, bad):
            roll = rng.random()
            if roll < 0.2:
                return rng.choice(["red", 3, {"a": 1}])
            picked = rng.sample(choices, rng.randint(0, len(choices)))
            if roll < 0.5 and picked:
                return picked + [picked[0]]  # a duplicate
            if roll < 0.7:
                return picked + [rng.choice(["purple", 7, True])]
            return picked
        low = schema.get("minItems", 0)
        high = min(schema.get("maxItems", len(choices)), len(choices))
        return rng.sample(choices, rng.randint(min(low, high), high))

    return schema, value


PRIMITIVES = [text, formatted, select, number, boolean, multi_select]


def obj(rng: random.Random, depth: int) -> Kind:
    """An object schema of 1..4 properties (groups and lists among them above the deepest
    level) and a maker of its values: leaving out optional keys, and with odds `bad` a
    required one, or adding an unknown one."""
    names = rng.sample(NAMES, rng.randint(1, 4))
    properties: Dict[str, Any] = {}
    makers: Dict[str, Maker] = {}
    for name in names:
        kinds: List[Callable[[random.Random], Kind]] = list(PRIMITIVES)
        if depth < 2:
            kinds += [lambda rng: group(rng, depth + 1), lambda rng: rows(rng, depth + 1)]
        schema, maker = rng.choice(kinds)(rng)
        if maybe(rng, 0.2):
            schema["title"] = name.title()
        if maybe(rng, 0.1):
            schema["description"] = f"The {name}."
        properties[name], makers[name] = schema, maker
    required = [n for n in names if maybe(rng)]
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required

    def value(rng: random.Random, bad: float) -> Any:
        values: Dict[str, Any] = {}
        for name in names:
            if name in required and not maybe(rng, bad / 2):
                values[name] = makers[name](rng, bad)
            elif name not in required and maybe(rng, 0.7):
                values[name] = makers[name](rng, bad)
        if maybe(rng, bad / 4):
            values["unknown"] = 1
        return values

    return schema, value


def group(rng: random.Random, depth: int) -> Kind:
    schema, maker = obj(rng, depth)
    return schema, lambda rng, bad: rng.choice(["x", 3, [{}]]) if maybe(rng, bad / 4) else maker(rng, bad)


def rows(rng: random.Random, depth: int) -> Kind:
    items, maker = obj(rng, depth)
    schema: Dict[str, Any] = {"type": "array", "items": items}
    bounds(rng, schema, ("minItems", "maxItems"), [None, 0, 1], [None, 1, 3])

    def value(rng: random.Random, bad: float) -> Any:
        if maybe(rng, bad / 4):
            return rng.choice([{"a": 1}, "rows", ["x"]])
        low = schema.get("minItems", 0)
        count = rng.randint(0, 4) if maybe(rng, bad) else rng.randint(low, schema.get("maxItems", low + 2))
        return [maker(rng, bad) for _ in range(count)]

    return schema, value


def root(rng: random.Random) -> Kind:
    schema, maker = obj(rng, 0)
    if maybe(rng, 0.3):
        schema["additionalProperties"] = False
    if maybe(rng, 0.2):
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if maybe(rng, 0.2):
        schema["title"] = "Details"
    return schema, maker


def strict(schema: Any) -> Any:
    """`schema` with what the contract documents said in JSON Schema: no unknown keys in any
    object, distinct multi-select items."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if out.get("type") == "object":
        out["additionalProperties"] = False
    if out.get("type") == "array" and isinstance(out.get("items"), dict) and out["items"].get("type") != "object":
        out["uniqueItems"] = True
    return out


def pairs() -> List[Tuple[Dict[str, Any], Any]]:
    rng = random.Random(SEED)
    made = []
    while len(made) < PAIRS:
        schema, maker = root(rng)
        # A few values for each schema, so accepts and rejects of the same one meet.
        for _ in range(rng.randint(1, 3)):
            made.append((schema, maker(rng, rng.choice([0.0, 0.0, 0.1, 0.3, 0.6]))))
    return made[:PAIRS]


def test_gatehouse_accepts_exactly_the_values_jsonschema_accepts(server: Server) -> None:
    checker = jsonschema.FormatChecker()
    assert {"date", "date-time", "email"} <= set(checker.checkers), "jsonschema checks these formats"
    session = str(uuid.uuid4())
    mismatches: List[str] = []
    accepted = rejected = 0
    with server.http() as http:
        for index, (schema, values) in enumerate(pairs()):
            expected = jsonschema.Draft202012Validator(strict(schema), format_checker=checker).is_valid(values)
            opened = http.post(
                f"/v1/sessions/{session}/gates",
                json={"kind": "harness.form", "body": f"Pair {index}", "json_schema": schema},
            )
            if opened.status_code != 201:
                mismatches.append(f"pair {index}: the open was refused: {opened.text}\n  schema: {json.dumps(schema, ensure_ascii=False)}")
                continue
            path = f"/v1/sessions/{session}/gates/{opened.json()['gate']['id']}"
            reply = http.post(path, json={"action": "accept", "values": values})
            if reply.status_code == 202:
                got: Optional[bool] = True
            elif reply.status_code == 400 and reply.json()["error"]["code"] == "gate_values_invalid":
                got = False
                assert reply.json()["error"]["fields"], f"pair {index}: a reject says where"
                http.post(f"{path}/close", json={"reason": "owner_closed"})
            else:
                got = None
            accepted += expected is True
            rejected += expected is False
            if got != expected:
                mismatches.append(
                    f"pair {index}: jsonschema {'accepts' if expected else 'rejects'}, gatehouse answered "
                    f"{reply.status_code} {reply.text}\n  schema: {json.dumps(schema, ensure_ascii=False)}\n"
                    f"  values: {json.dumps(values, ensure_ascii=False)}"
                )
    for mismatch in mismatches:
        print(mismatch)
    # The comparison can fail both ways: a good share of each.
    assert accepted >= PAIRS // 4 and rejected >= PAIRS // 4, (accepted, rejected)
    assert not mismatches, f"{len(mismatches)} of {PAIRS} pairs differ:\n" + "\n".join(mismatches)
