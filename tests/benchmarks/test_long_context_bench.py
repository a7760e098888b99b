"""``python -m benchmarks.long_context``: it ends with the ``machine:`` line every benchmark prints, and a
target missed while the machine was busy says so (the targets assume a quiet core). The cases are replaced
by a record of their shape here: this checks the report, not a time."""

from benchmarks import long_context


def test_a_target_missed_on_a_busy_machine_says_busy():
    assert long_context.met_label(True, True) == "yes"
    assert long_context.met_label(False, False) == "NO"
    assert long_context.met_label(False, True) == "NO (busy)"


def test_the_report_ends_with_the_machine_line(capsys, monkeypatch):
    record = {
        "case": "full4k",
        "attention": "full",
        "L": 4096,
        "heads": 16,
        "seconds": 9.0,
        "pooled_pass_s": 1.0,
        "cpu_s": 9.0,
        "pooled_cpu_s": 1.0,
        "target_s": 1.5,
        "met": False,
        "busy": True,
        "peak_rss_rise_mb": 1.0,
        "cells": [256, 256],
        "backend": "torch",
        "mean_loss_nats": 1.0,
        "dense_probs_one_layer_mb_formula": 1,
    }
    monkeypatch.setattr(long_context, "run_case", lambda name: record)
    assert long_context.main(["--cases", "full4k"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "NO (busy)" in next(line for line in lines if line.startswith("full4k"))
    assert lines[-1].startswith("machine: ")
