"""The warm compile server's machinery: `tileiras-async serve` keeps worker processes with the compiler, llvmlite,
libdevice and the target machines loaded, and compiles for `tileiras` drop-in calls sent over a per-user Unix
socket.  Nothing here knows what a compile is (the command hands the daemon its worker functions), so the
drop-in, the batch command and the schema generator use it from below the command lines.

    paths.py     where the socket lives; whether the drop-in uses (or starts) a server
    protocol.py  the messages (msgspec, length-prefixed msgpack frames)
    wire.py      the msgpack subset the drop-in's client speaks without msgspec
    client.py    the drop-in's side: connect, start on demand, send a compile, read the outcome
    daemon.py    the server: trio accept loop, trio-parallel worker pool, timeouts, idle shutdown

The command line is cli/serve.py (`tileiras-async serve [--stop | --status | --detach]`), what runs in a worker
cli/serve_worker.py (one drop-in compile, `tileiras_compile.produce`), and `python -m tileiras_async.server` the
same command without the batch CLI's imports.
"""
