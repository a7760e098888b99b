"""The report file pair: JSON (everything) and Markdown (tables), rewritten after every section."""

from __future__ import annotations

import json
import os
import time


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # a reader (or a kill) never sees half a file


def md_table(head: list, rows: list) -> str:
    """A Markdown table; cells are str()-ed and pipes escaped."""
    cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


class Report:
    """``report.section(name, data, markdown)`` stores a finished section and rewrites both files."""

    def __init__(self, out_dir: str, meta: dict):
        os.makedirs(out_dir, exist_ok=True)
        self.json_path = os.path.join(out_dir, "gpu_report.json")
        self.md_path = os.path.join(out_dir, "gpu_report.md")
        self.t0 = time.monotonic()
        self.data = {"meta": meta, "status": "running", "sections": {}}
        self.markdown: list[tuple[str, str]] = []
        self.flush()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def section(self, name: str, data: dict, markdown: str) -> None:
        data = {**data, "seconds": round(data.get("seconds", 0.0), 2)}
        self.data["sections"][name] = data
        self.markdown.append((name, markdown))
        self.flush()

    def finish(self) -> None:
        self.data["status"] = "complete"
        self.data["seconds"] = round(self.elapsed(), 1)
        self.flush()

    def flush(self) -> None:
        self.data["written_after_s"] = round(self.elapsed(), 1)
        _atomic_write(self.json_path, json.dumps(self.data, indent=1, default=str))
        meta = self.data["meta"]
        parts = [
            f"# GPU report ({self.data['status']})",
            "",
            f"device: {meta.get('device')}; mode: {meta.get('mode')}; written after {self.data['written_after_s']} s",
            "",
        ]
        for name, text in self.markdown:
            parts += [f"## {name}", "", text, ""]
        _atomic_write(self.md_path, "\n".join(parts))
