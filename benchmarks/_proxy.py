"""A TCP proxy on a loopback port, served by an asyncio loop in a daemon thread: what a benchmark puts between
a client and a server to see or shape their traffic (a distant database, a Service balancing replicas).

    class Far(TcpProxy):
        def upstream(self):                      # where a new connection goes
            return self.target
        def pipes(self, reader, writer, up_reader, up_writer):   # both directions, shaped
            return pipe(reader, up_writer), pipe(up_reader, writer, delay_s=0.05)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


class TcpProxy:
    """Listens on 127.0.0.1:`port`; each connection goes to `upstream()` through the two coroutines `pipes`
    returns (client to server, server to client). A connection the upstream refuses is closed."""

    def __init__(self, port: int, name: str) -> None:
        self.port = port
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        threading.Thread(target=self._serve, args=(started,), name=name, daemon=True).start()
        if not started.wait(10):
            raise RuntimeError(f"the {name} did not start")

    def upstream(self) -> tuple[str, int]:
        raise NotImplementedError

    def pipes(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up_reader: asyncio.StreamReader,
              up_writer: asyncio.StreamWriter) -> tuple[Awaitable[None], Awaitable[None]]:
        return pipe(reader, up_writer), pipe(up_reader, writer)

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        started.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream())
        except OSError:
            writer.close()
            return
        await asyncio.gather(*self.pipes(reader, writer, up_reader, up_writer))


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float = 0.0,
               seen: Callable[[bytes], None] | None = None) -> None:
    """Bytes from `reader` to `writer` in order, each `delay_s` after it came (queued, so that bytes in flight
    are not held back by each other's delay); `seen` is told each chunk as it comes."""
    loop = asyncio.get_running_loop()
    held: asyncio.Queue = asyncio.Queue()

    async def send() -> None:
        try:
            while (item := await held.get()) is not None:
                await asyncio.sleep(item[0] - loop.time())
                writer.write(item[1])
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(65536):
            if seen is not None:
                seen(data)
            held.put_nowait((loop.time() + delay_s, data))
    except (ConnectionError, OSError):
        pass
    finally:
        held.put_nowait(None)
        await sender
