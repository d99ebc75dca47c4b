"""Tests of scripts/chart_values_table.py (run by scripts/helm-check.sh)."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chart_values_table as gen  # noqa: E402

VALUES = """\
# A header comment, not a value's.

# -- Replicas of the thing.
replicas: 2

agent:
  # -- Deploy it. Two lines
  # of description.
  enabled: true
  # -- Tolerations (a commented list: one row).
  tolerations:
    - key: nvidia.com/gpu
      operator: Exists
  resources:
    # -- Requests (a commented map: one row).
    requests:
      cpu: 10m
  undocumented: 3
"""

SCHEMA = {
    "properties": {
        "replicas": {"type": "integer"},
        "agent": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "tolerations": {"type": "array"},
                "resources": {"type": "object", "properties": {"requests": {"type": "object"}}},
                "undocumented": {"type": ["integer", "string"]},
                "onlyInSchema": {"type": "string"},
            },
        },
        "global": {"type": "object"},
    }
}


class DocumentedKeys(unittest.TestCase):
    def test_comments_document_the_key_below_them(self) -> None:
        docs = gen.documented_keys(VALUES, yaml.safe_load(VALUES))
        self.assertEqual(list(docs), ["replicas", "agent.enabled", "agent.tolerations", "agent.resources.requests"])
        self.assertEqual(docs["agent.enabled"], "Deploy it. Two lines of description.")
        # The list item's keys are not values of their own.
        self.assertNotIn("agent.tolerations.operator", docs)

    def test_undocumented_and_schema_only_values_are_problems(self) -> None:
        found = gen.problems(VALUES, SCHEMA)
        self.assertEqual(len(found), 2, found)
        self.assertTrue(found[0].startswith("agent.undocumented: no `# --` comment"), found)
        self.assertTrue(found[1].startswith("agent.onlyInSchema: in values.schema.json but not in values.yaml"), found)

    def test_the_table_has_type_default_and_description(self) -> None:
        rows = gen.table(VALUES, SCHEMA).splitlines()
        self.assertEqual(rows[0], "| key | type | default | description |")
        self.assertIn('| `agent.resources.requests` | object | `{"cpu": "10m"}` | Requests (a commented map: one row). |',
                      rows)
        self.assertIn("| `agent.tolerations` | array | "
                      '`[{"key": "nvidia.com/gpu", "operator": "Exists"}]` | Tolerations (a commented list: one row). |',
                      rows)

    def test_cells_keep_code_and_escape_tags_and_pipes(self) -> None:
        self.assertEqual(gen.cell("<release> or `a|<b>`"), "&lt;release&gt; or `a\\|<b>`")

    def test_a_stale_table_is_replaced_between_the_markers(self) -> None:
        readme = f"intro\n{gen.START}\n| old |\n{gen.END}\nafter\n"
        self.assertEqual(gen.with_table(readme, "| new |\n"), f"intro\n{gen.START}\n| new |\n{gen.END}\nafter\n")
        self.assertIsNone(gen.with_table("no markers", "| new |\n"))


class TheChart(unittest.TestCase):
    def test_every_value_of_the_chart_is_documented(self) -> None:
        values_text = (gen.CHART / "values.yaml").read_text()
        schema = yaml.safe_load((gen.CHART / "values.schema.json").read_text())
        self.assertEqual(gen.problems(values_text, schema), [])
        docs = gen.documented_keys(values_text, yaml.safe_load(values_text))
        for key in ("agent.repairInterval", "agentLabelGuard.acceptUnguardedAgent"):
            self.assertIn(key, docs)


if __name__ == "__main__":
    unittest.main()
