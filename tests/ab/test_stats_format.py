#!/usr/bin/env python3
"""asyncshim-ab reads the documented statistics format: the example of
docs/statistics-format.md, valid under docs/statistics.schema.json, reduces
to the figures it holds. (The other tests here use fake documents with
fields of their own on purpose, to check that unknown fields are ignored;
they are not shim output, so they are not validated against the schema.)"""

import os
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ next to scripts/asyncshim-ab
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "support"))
import ab_support  # noqa: E402
import stats_schema  # noqa: E402

ab = ab_support.load_ab()


class DocumentedFormat(unittest.TestCase):
    def test_the_documented_example_is_read(self):
        doc = stats_schema.validate(stats_schema.documented_example())
        figures = ab.parse_stats(doc)
        self.assertEqual(figures["allocations"], 1200)
        self.assertEqual(figures["peak_bytes_in_use"], 9999999)
        self.assertEqual(figures["pool_reserved_high_water"], 4 << 30)
        self.assertEqual(figures["failed_allocations"], 0)
        self.assertEqual(figures["time_in_calls_ns"], 812345 + 401234 + 120 + 3400)
        self.assertEqual(figures["mode"], "pool")
        self.assertEqual(figures["devices"], 1)

    def test_an_observe_document_has_no_pool_figure(self):
        doc = stats_schema.documented_example()
        doc["mode"] = "observe"
        doc["devices"][0]["pool_reserved_high_water"] = None
        figures = ab.parse_stats(stats_schema.validate(doc))
        self.assertIsNone(figures["pool_reserved_high_water"])


if __name__ == "__main__":
    unittest.main()
