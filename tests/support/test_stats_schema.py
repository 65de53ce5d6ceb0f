"""The statistics schema (docs/statistics.schema.json) and its validator
(stats_schema.py): the documented example is valid, broken documents are
not, with jsonschema and with the built-in validator alike, and the format
page names every field of the schema.

    python3 test_stats_schema.py
"""
import copy
import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats_schema  # noqa: E402

FORMAT_PAGE = stats_schema.FORMAT_PAGE
documented_example = stats_schema.documented_example


def broken_documents():
    """(what is wrong, document) pairs, each with one fault."""
    good = documented_example()

    def changed(edit):
        doc = copy.deepcopy(good)
        edit(doc)
        return doc

    dev = lambda doc: doc["devices"][0]  # noqa: E731
    return [
        ("a required field is missing", changed(lambda d: d.pop("unattributed"))),
        ("a device field is missing", changed(lambda d: dev(d).pop("peak_bytes_in_use"))),
        ("a passed-through reason is missing", changed(lambda d: dev(d)["passed_through"].pop("capture"))),
        ("an unknown top-level field", changed(lambda d: d.update(extra=1))),
        ("an unknown device field", changed(lambda d: dev(d).update(bytes_freed=3))),
        ("an unknown entry point", changed(lambda d: dev(d)["time_in_calls_ns"].update(cudaMallocAsync=1))),
        ("another format", changed(lambda d: d.update(format="something-else"))),
        ("another format version", changed(lambda d: d.update(format_version=2))),
        ("the format version as a string", changed(lambda d: d.update(format_version="1"))),
        ("a count as a string", changed(lambda d: dev(d).update(allocations="many"))),
        ("a count as a boolean", changed(lambda d: dev(d).update(frees=True))),
        ("a count as a fraction", changed(lambda d: dev(d).update(bytes_in_use=1.5))),
        ("a negative count", changed(lambda d: d["unattributed"].update(frees_passed_through=-1))),
        ("null where a count belongs", changed(lambda d: dev(d).update(failed_allocations=None))),
        ("an unknown mode", changed(lambda d: d.update(mode="pooled"))),
        ("an unknown ordering", changed(lambda d: d["settings"].update(ordering="fast"))),
        ("a size that is not in the shim's form", changed(lambda d: d["settings"].update(initial_pool_size="4GB"))),
        ("half-free as the release threshold", changed(lambda d: d["settings"].update(release_threshold="half-free"))),
        ("a device out of range", changed(lambda d: dev(d).update(device=64))),
        ("devices as an object", changed(lambda d: d.update(devices={"0": dev(d)}))),
        ("the document as an array", [good]),
    ]


class Validators:
    """Run by both validators (the subclasses say which)."""

    def errors(self, doc):
        raise NotImplementedError

    def test_the_documented_example_is_valid(self):
        self.assertEqual(self.errors(documented_example()), [])

    def test_other_valid_documents(self):
        doc = documented_example()
        doc["devices"] = []  # no device had activity
        doc["mode"] = "observe"
        doc["settings"].update(initial_pool_size=None, release_threshold="12.5%", stream="per-thread")
        self.assertEqual(self.errors(doc), [])
        doc = documented_example()
        doc["devices"][0]["pool_reserved_high_water"] = None
        doc["devices"][0]["allocations"] = 2 ** 64 - 1
        doc["settings"].update(initial_pool_size="half-free", release_threshold="0B", ordering="sync")
        self.assertEqual(self.errors(doc), [])

    def test_every_broken_document_fails(self):
        for what, doc in broken_documents():
            with self.subTest(what):
                self.assertNotEqual(self.errors(doc), [], f"{what}: accepted")


class BuiltIn(Validators, unittest.TestCase):
    def errors(self, doc):
        return stats_schema.builtin_errors(doc)

    def test_a_schema_keyword_it_does_not_know_is_refused(self):
        schema = stats_schema.load_schema()
        schema["properties"]["pid"]["multipleOf"] = 2
        with self.assertRaisesRegex(ValueError, "multipleOf"):
            stats_schema.builtin_errors(documented_example(), schema)

    def test_the_message_names_the_field(self):
        doc = documented_example()
        doc["devices"][0]["allocations"] = "many"
        self.assertEqual(self.errors(doc), ["/devices/0/allocations: 'many' is not of type integer"])


@unittest.skipIf(stats_schema._jsonschema() is None,
                 "the jsonschema module is missing (Debian: python3-jsonschema); the built-in validator is tested")
class JsonSchema(Validators, unittest.TestCase):
    def errors(self, doc):
        return stats_schema.errors(doc)

    def test_the_schema_is_a_valid_schema(self):
        import jsonschema
        jsonschema.Draft7Validator.check_schema(stats_schema.load_schema())


class EntryPoints(unittest.TestCase):
    def test_validate_raises_with_every_problem(self):
        doc = documented_example()
        doc.pop("pid")
        doc["mode"] = "pooled"
        with self.assertRaises(stats_schema.StatsSchemaError) as caught:
            stats_schema.validate(doc)
        self.assertIn("pid", str(caught.exception))
        self.assertIn("pooled", str(caught.exception))

    def test_validate_returns_a_valid_document(self):
        doc = documented_example()
        self.assertIs(stats_schema.validate(doc), doc)


class FormatPage(unittest.TestCase):
    def test_every_field_of_the_schema_is_documented(self):
        with open(FORMAT_PAGE, encoding="utf-8") as f:
            page = f.read()
        names = set()

        def collect(node):
            if isinstance(node, dict):
                names.update(node.get("properties", {}))
                for value in node.values():
                    collect(value)
        collect(stats_schema.load_schema())
        missing = sorted(n for n in names if f"`{n}`" not in page)
        self.assertEqual(missing, [], "fields of the schema not described in docs/statistics-format.md")


if __name__ == "__main__":
    print(f"validator: {stats_schema.validator_name()}")
    unittest.main(verbosity=2)
