"""The export's files, from figures already drawn: ``archive`` (the zip: config, README, offline HTML
page, sweep CSV, PNGs) and ``png`` (PNGs through kaleido and a local Chrome); no torch."""
