"""The async compile pipeline: a trio supervisor moving msgspec stage messages through a pool
of worker processes (trio-parallel), with an event stream for --json, the summary and the
dashboard.

    config.py      BatchConfig, input expansion, output names
    events.py      the event types (tagged msgspec union)
    messages.py    job envelope and worker notes (what crosses the process boundary)
    worker.py      runs inside workers: one stage per job, warm caches, fault injection
    pool.py        trio-parallel pool + timeouts, memory watchdog, priority slots
    tools.py       ptxas / nvdisasm with the real tool's harness semantics
    supervisor.py  the batch: modules -> targets -> kernels -> stages -> outputs
    summary.py     event consumers: JSON lines, diagnostics printer, summary table
    cli_compile.py `tileiras-async compile`
    schemas.py     JSON Schemas of all messages and events (schemas/*.json)
"""
