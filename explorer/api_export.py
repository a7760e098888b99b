"""``/export`` for API clients (``gradio_client``): the export zip of a config and a text.

The same archive as the app's Export button (``explorer.export_zip``), minus the session's sweeps
(an API client has no session: ``/benchmark`` returns sweep records directly). An API call has no
browser to run the button's clean-up step afterwards, so the zip is written into a fresh temporary
folder, copied into Gradio's file cache (where ``delete_cache`` ages it out, as it does the
button's download) and the folder deleted before the call returns: nothing stays behind.
"""
from __future__ import annotations

import os
import tempfile

from gradio.processing_utils import save_bytes_to_cache
from gradio.utils import get_upload_folder

from . import export_zip, ui_jobs
from .encdec import DEFAULT_SEPARATOR
from .ui_api import _api, _api_config, _api_text
from .ui_encdec import SEQ2SEQ_TEXT


def api_export(config_json: str, text: str, separator: str = DEFAULT_SEPARATOR) -> dict:
    """The export zip (config.json, README.txt, figures.html, a PNG per figure when the server has
    kaleido and a Chrome) of the config on the text -> the file (``gradio_client`` downloads it).
    An encoder-decoder reads ``text`` as ``source <separator> target``."""
    def run():
        cfg = _api_config(config_json)
        text_ = _api_text(text)
        if cfg.architecture == "encoder_decoder" and (text is None or text == ""):
            text_ = SEQ2SEQ_TEXT
        sep = (separator if isinstance(separator, str) and separator else DEFAULT_SEPARATOR)[:8]
        folder = tempfile.mkdtemp(prefix="explorer-export-")
        try:
            sections, sweeps = ui_jobs.export_sections(cfg, text_, None, sep)
            path, _ = export_zip.write_zip(folder, cfg, text_, sections, sweeps, separator=sep)
            with open(path, "rb") as f:
                cached = save_bytes_to_cache(f.read(), os.path.basename(path), get_upload_folder())
        finally:
            ui_jobs.cleanup_export(folder)
        return {"path": cached, "orig_name": os.path.basename(cached), "meta": {"_type": "gradio.FileData"}}
    return _api(run)
