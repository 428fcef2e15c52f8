"""The warm compile server: `tileiras-async serve` keeps worker processes with the compiler, llvmlite,
libdevice and the target machines loaded, and compiles for `tileiras` drop-in calls sent over a
per-user Unix socket.

    paths.py     where the socket lives; whether the drop-in uses (or starts) a server
    protocol.py  the messages (msgspec, length-prefixed msgpack frames)
    client.py    the drop-in's side: connect, start on demand, send a compile, read the outcome
    daemon.py    the server: trio accept loop, trio-parallel worker pool, timeouts, idle shutdown
    worker.py    what runs in a worker: one drop-in compile (`tileiras_compile.produce`)
    cli.py       `tileiras-async serve [--stop | --status | --detach]`
"""
