"""Validation of the shim's statistics documents against
docs/statistics.schema.json, for the tests that read them.

    import stats_schema                      # tests/support on sys.path
    doc = stats_schema.load_and_validate(path)   # raises StatsSchemaError
    stats_schema.validate(doc)
    stats_schema.errors(doc)                 # [] when valid

With the `jsonschema` module (Debian: python3-jsonschema) the schema's own
validator checks the document. Without it (the GPU machine may lack it) a
small built-in validator does, one that knows exactly the keywords the schema
uses and refuses a schema with any other keyword, so that validation never
silently passes. ASYNCSHIM_STATS_VALIDATOR=builtin forces the built-in one.
"""
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_PATH = os.path.normpath(os.path.join(HERE, "..", "..", "docs", "statistics.schema.json"))
FORMAT_PAGE = os.path.join(os.path.dirname(SCHEMA_PATH), "statistics-format.md")


def documented_example():
    """The one JSON example of the format page (docs/statistics-format.md)."""
    with open(FORMAT_PAGE, encoding="utf-8") as f:
        blocks = re.findall(r"```json\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1, f"expected one json block in {FORMAT_PAGE}, found {len(blocks)}"
    return json.loads(blocks[0])

# Keywords the built-in validator checks, and those it may ignore (annotations).
CHECKED = {"type", "const", "enum", "required", "properties", "additionalProperties", "items",
           "minimum", "maximum", "pattern", "$ref"}
ANNOTATIONS = {"$schema", "$id", "title", "description", "definitions", "$comment"}


class StatsSchemaError(AssertionError):
    """A statistics document that does not match the schema."""


def load_schema(path=SCHEMA_PATH):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _jsonschema():
    if os.environ.get("ASYNCSHIM_STATS_VALIDATOR", "") == "builtin":
        return None
    try:
        import jsonschema  # noqa: PLC0415
    except ImportError:
        return None
    return jsonschema


def validator_name():
    """'jsonschema' or 'built-in': which one errors() uses."""
    return "jsonschema" if _jsonschema() is not None else "built-in"


# ---- the built-in validator -------------------------------------------------

def _type_matches(value, name):
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "integer":  # JSON Schema: 1.0 is an integer; a boolean never is
        return (isinstance(value, int) and not isinstance(value, bool)) or \
            (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    raise ValueError(f"schema: unknown type {name!r}")


def _equal(a, b):
    # JSON equality: true is not 1, 1 is 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _resolve(root, ref):
    if not ref.startswith("#/"):
        raise ValueError(f"schema: only local references are supported, not {ref!r}")
    node = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _check_keywords(schema, where):
    unknown = set(schema) - CHECKED - ANNOTATIONS
    if unknown:
        raise ValueError(f"schema at {where or '/'}: keyword(s) {sorted(unknown)} unknown to the built-in "
                         "validator; teach tests/support/stats_schema.py them")


def _builtin(value, schema, root, where, out):
    if schema is True:
        return
    if schema is False:
        out.append(f"{where or '/'}: not allowed")
        return
    _check_keywords(schema, where)
    if "$ref" in schema:  # draft-07: siblings of $ref are ignored
        _builtin(value, _resolve(root, schema["$ref"]), root, where, out)
        return
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_matches(value, n) for n in names):
            out.append(f"{where or '/'}: {value!r} is not of type {' or '.join(names)}")
            return
    if "const" in schema and not _equal(value, schema["const"]):
        out.append(f"{where or '/'}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and not any(_equal(value, e) for e in schema["enum"]):
        out.append(f"{where or '/'}: {value!r} is not one of {schema['enum']!r}")
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if "minimum" in schema and numeric and value < schema["minimum"]:
        out.append(f"{where or '/'}: {value!r} is less than the minimum {schema['minimum']}")
    if "maximum" in schema and numeric and value > schema["maximum"]:
        out.append(f"{where or '/'}: {value!r} is greater than the maximum {schema['maximum']}")
    if "pattern" in schema and isinstance(value, str) and re.search(schema["pattern"], value) is None:
        out.append(f"{where or '/'}: {value!r} does not match {schema['pattern']!r}")
    if isinstance(value, dict):
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{where or '/'}: {name!r} is a required property")
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                _builtin(item, properties[name], root, f"{where}/{name}", out)
            elif "additionalProperties" in schema:
                extra = schema["additionalProperties"]
                if extra is False:
                    out.append(f"{where or '/'}: additional property {name!r} is not allowed")
                else:
                    _builtin(item, extra, root, f"{where}/{name}", out)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _builtin(item, schema["items"], root, f"{where}/{index}", out)


def builtin_errors(document, schema=None):
    """The built-in validator's messages for `document` ([] when valid)."""
    schema = load_schema() if schema is None else schema
    out = []
    _builtin(document, schema, schema, "", out)
    return out


# ---- the entry points -------------------------------------------------------

def errors(document, schema=None):
    """Every way `document` differs from the schema ([] when valid)."""
    schema = load_schema() if schema is None else schema
    jsonschema = _jsonschema()
    if jsonschema is None:
        return builtin_errors(document, schema)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    found = cls(schema).iter_errors(document)
    return [f"/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in found]


def validate(document, what="statistics document"):
    """Raises StatsSchemaError listing every difference from the schema."""
    problems = errors(document)
    if problems:
        raise StatsSchemaError(f"{what} does not match docs/statistics.schema.json ({validator_name()}):\n  "
                               + "\n  ".join(problems))
    return document


def load_and_validate(path):
    """The JSON document at `path`, validated."""
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    return validate(document, what=path)
