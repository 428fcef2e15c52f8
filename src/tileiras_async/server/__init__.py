"""`python -m tileiras_async.server`: the warm compile server's command without the batch CLI's imports (what
the drop-in starts when $TILEIRAS_ASYNC_SERVER=start).  The server is serving/ (socket, protocol, client,
daemon); the command and the worker's compile are cli/serve.py and cli/serve_worker.py.
"""
