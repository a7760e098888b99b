"""Hostile tokenizers uploaded to a served app (``python app.py`` under an 8 GiB address-space limit),
driven over HTTP with ``gradio_client``: the expanding normalizer that aborted the server is refused by
name and ``/analyze`` with 16,384 "a" on its id answers clearly; a tokenizer that expands or panics only
on the text it waits for answers that text with a message naming tokenizer.json; 30 panicking requests
in a row leave the server answering ``/analyze`` of the bundled model between them; the server's peak
memory stays where it was."""

import json
import shutil
import time
import urllib.request

import pytest
from gradio_client import Client, handle_file
from tokenizer_attacks import LATE, LATE_TEXT, hostile_checkpoint, hostile_json

from explorer.analysis.weights.checkpoint_upload import digest

GROWTH = 512 << 20  # the server's peak RSS may grow by this much over all the attacks
FILES = ("config.json", "model.safetensors", "tokenizer.json")
PANICS = ["(a+)+$|{}!", r"(\w+\s?)*$|{}!"]  # retry-limit regexes, each upload made unique by its second branch


@pytest.fixture(scope="module")
def server(limited_app):
    """The shared ``limited_app`` (8 GiB of address space): these clients send no ``X-Forwarded-For``,
    so they are one visitor, the socket's address."""
    assert limited_app["limit_as"] == 8 << 30
    return limited_app["url"], limited_app["pid"], Client(limited_app["url"], verbose=False)


def status(pid: int) -> dict:
    """The server's ``/proc`` status lines (``VmHWM``: its peak resident set, kB)."""
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":", 1) for line in f if ":" in line)


def peak(pid: int) -> int:
    return int(status(pid)["VmHWM"].split()[0]) * 1024


def reset_peak(pid: int) -> int:
    """Reset the server's peak resident set to its current one (Linux ``clear_refs``: the server is shared
    with other files, whose work may have set its peak) -> that peak, from which a test measures growth."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return peak(pid)


def upload(url: str, client: Client, folder, tmp_path) -> tuple:
    """The Upload button's event over HTTP with ``folder``'s files -> (Weights value, status text)."""
    with urllib.request.urlopen(url + "config", timeout=30) as r:
        cfg = json.load(r)
    comps = {c["id"]: c for c in cfg["components"]}
    dep = next(d for d in cfg["dependencies"] if d.get("api_name") == "upload_checkpoint")
    sent = tmp_path / f"sent-{time.monotonic_ns()}"
    sent.mkdir()
    args = []
    for cid in dep["inputs"]:
        kind = comps[cid]["type"]
        if kind == "uploadbutton":
            args.append([handle_file(str(shutil.copyfile(folder / n, sent / n))) for n in FILES])
        elif kind != "state":  # gradio_client leaves session state out
            args.append(comps[cid]["props"].get("value"))
    out = client.predict(*args, fn_index=dep["id"])
    return str((out[0] or {}).get("value") or ""), str(out[1]).replace("\\", "")  # the status is Markdown


def bundled_answers(client: Client) -> None:
    out = client.predict("", "The quick brown fox.", "=>", "bundled", api_name="/analyze")
    assert out["row_sums_ok"] and len(out["tokens"]) == len("The quick brown fox.")  # byte tokens


def test_the_expanding_tokenizer_is_refused_and_its_id_answers_clearly(server, tmp_path):
    url, pid, client = server
    before = reset_peak(pid)
    folder = hostile_checkpoint(tmp_path / "expanding", "expanding normalizer")
    weights, said = upload(url, client, folder, tmp_path)
    assert "tokenizer.json" in said and not weights.startswith("checkpoint:upload:")
    ckpt = "checkpoint:upload:" + digest({n: folder / n for n in FILES})
    started = time.monotonic()
    with pytest.raises(Exception) as err:
        client.predict("", "a" * 16_384, "=>", ckpt, api_name="/analyze")
    assert "is not valid" in str(err.value) and time.monotonic() - started < 30
    bundled_answers(client)
    assert peak(pid) - before < GROWTH


@pytest.mark.parametrize("name", sorted(LATE))
def test_a_tokenizer_that_strikes_on_the_text_answers_it_by_name(server, tmp_path, name):
    """It passes the probes, so the upload is accepted; the text it waits for gets a message, every time."""
    url, pid, client = server
    before = reset_peak(pid)
    weights, said = upload(url, client, hostile_checkpoint(tmp_path / "late", name), tmp_path)
    assert weights.startswith("checkpoint:upload:"), said
    for _ in range(3):  # the worker fails twice, then the tokenizer is refused without running
        with pytest.raises(Exception, match="tokenizer.json"):
            client.predict("", LATE_TEXT, "=>", weights, api_name="/analyze")
        bundled_answers(client)
    assert peak(pid) - before < GROWTH


def test_thirty_panicking_requests_in_a_row(server, tmp_path):
    url, pid, client = server
    before = reset_peak(pid)
    weights, said = upload(url, client, hostile_checkpoint(tmp_path / "late", "Split regex (Ж+)+$"), tmp_path)
    assert weights.startswith("checkpoint:upload:"), said
    folder = hostile_checkpoint(tmp_path / "panics", "Split regex (a+)+$")
    for i in range(30):
        started = time.monotonic()
        if i % 2:  # an upload whose tokenizer panics on the probes
            regex = PANICS[i % len(PANICS)].format("q" * (i + 1))
            (folder / "tokenizer.json").write_text(
                hostile_json(
                    {
                        "pre_tokenizer": {
                            "type": "Split",
                            "pattern": {"Regex": regex},
                            "behavior": "Isolated",
                            "invert": False,
                        }
                    }
                )
            )
            shown, said = upload(url, client, folder, tmp_path)
            assert "tokenizer.json" in said and "panicked" in said and shown != weights, said
        else:  # the accepted tokenizer on the text that makes it panic
            with pytest.raises(Exception, match="tokenizer.json"):
                client.predict("", LATE_TEXT, "=>", weights, api_name="/analyze")
        assert time.monotonic() - started < 60
        bundled_answers(client)
    assert peak(pid) - before < GROWTH
