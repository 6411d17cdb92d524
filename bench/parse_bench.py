"""The probe client's per-token parsing cost, with no sockets: the typed fast path against the general one.

Run: ``python bench/parse_bench.py [--streams 100] [--rounds 7]``. Replays the reads of 64-token streams
as ``bench/truth_server.py`` sends them (completions and chat: the head, one read per content chunk,
then the finish, usage and ``[DONE]`` chunks in one read), ``--streams`` of them interleaved read by
read, through ``HttpConnection`` and ``StreamReader`` on uvloop, exactly as the client decodes what
its sockets read. Three ways, interleaved round by round on the same reads:

* ``kept``: as the client runs on Linux with the C reads (``_reads.c``): after the first token, each
  content read that is one whole chunk of one lone event is kept by the transport as (stamp, event
  data) with no Python call (``socket_reads.KeepMode``; here the replay appends the same tuples), and the
  reader decodes runs of them in one go (``StreamState.on_payloads``);
* ``client``: every read through ``HttpConnection`` and the reader, as with the Python reads (a plain
  chunk read as its text alone by ``chunk_shapes.py``);
* ``general``: the typed fast path off (``StreamState.fast_read`` None: line-split SSE, JSON to dicts,
  ``read_chunk``), the baseline.

Prints process CPU per token of the best round of each and their ratio, and checks that both ways
account every stream alike. This is only the decoding: ``bench/probe_bench.py`` measures the whole
client over real sockets against ground truth. The VM is noisy: compare the ratio of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from typing import Any

import uvloop

from exporter.probe.http import HttpConnection
from exporter.probe.socket_reads import KeepMode
from exporter.probe.stream_reader import StreamReader
from exporter.streams.decoder import StreamState
from exporter.streams.openai import FORMATS
from exporter.streams.result import ProbeResult
from exporter.streams.tokens import TokenCounter

# Run as ``python bench/parse_bench.py``, this folder is on the path and its parent is not.
try:
    from bench import truth_server
except ModuleNotFoundError:
    import truth_server

TOKENS = 64


class _Transport:
    """Where the connection writes its request: nowhere."""

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def stream_reads(api: str) -> list[bytes]:
    chat = api == "chat"
    content = truth_server.content_chunk(chat, 1)
    return [truth_server.HEAD, *[content] * TOKENS, truth_server.closing_frames(chat, TOKENS)]


def event_data(read: bytes) -> bytes:
    """What keep mode keeps of a read that is one chunk of one lone event: the event's data."""
    _size, _, rest = read.partition(b"\r\n")
    return rest[len(b"data: ") : -len(b"\n\n\r\n")]


async def replay(api: str, conns: list[HttpConnection], reads: list[bytes], way: str) -> list[Any]:
    """Every stream's reads, interleaved read by read; returns what each stream's result says."""
    states, readers = [], []
    for conn in conns:
        state = StreamState(ProbeResult(api=api, max_tokens=TOKENS), FORMATS[api], TokenCounter())  # type: ignore[index]
        if way == "general":
            state.fast_read = None
        reader = StreamReader(state, 1 << 20)
        conn.start(b"", reader)
        states.append(state)
        readers.append(reader)
    modes: list[KeepMode | None] = [None] * len(conns)
    data_of = {read: event_data(read) for read in reads[2:-1]}  # the content reads after the first
    for index, data in enumerate(reads):
        now = 1.0 + index * 0.02
        for number, conn in enumerate(conns):
            mode = modes[number]
            if mode is None:
                conn.received(now, data)
                if way == "kept" and readers[number].state.has_token:
                    modes[number] = readers[number].keep_mode(lambda: None)
            elif data in data_of:  # what _reads.c does for such a read, in C
                mode.kept.append((now, data_of[data]))
                mode.state.last_read = now
                if len(mode.kept) >= mode.due_at:
                    mode.due()
            else:  # any other read ends keep mode and goes to the connection
                modes[number] = None
                conn.received(now, data)
        await asyncio.sleep(0)  # the loop runs the readers' scheduled decoding
    await asyncio.sleep(0)
    summary = []
    for state in states:
        state.finish()
        result = state.result
        summary.append((result.outcome, result.token_times, result.token_counts, result.finish_reason))
    return summary


async def measure(api: str, streams: int, rounds: int) -> dict[str, float]:
    reads = stream_reads(api)
    conns = []
    for _ in range(streams):
        conn = HttpConnection(time.monotonic)
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        conns.append(conn)
    ways = ["kept", "client", "general"]
    best = dict.fromkeys(ways, float("inf"))
    for round_ in range(rounds):
        order = ways[round_ % 3 :] + ways[: round_ % 3]  # rotated: this VM is noisy
        said = {}
        for way in order:
            start = time.process_time()
            said[way] = await replay(api, conns, reads, way)
            best[way] = min(best[way], time.process_time() - start)
        if not said["kept"] == said["client"] == said["general"]:
            raise SystemExit(f"{api}: the ways account the streams differently")
    return {way: seconds / (streams * TOKENS) * 1e6 for way, seconds in best.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100, help="streams replayed together (default 100)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of each way, interleaved (default 7)")
    args = parser.parse_args()
    gc.freeze()
    print(f"{args.streams} interleaved streams of {TOKENS} tokens, best of {args.rounds} rounds")
    print("api          kept us/token   client us/token   general us/token   kept/general   client/general")
    for api in ("completions", "chat"):
        f = uvloop.run(measure(api, args.streams, args.rounds))
        print(
            f"{api:12s} {f['kept']:13.2f} {f['client']:17.2f} {f['general']:18.2f}"
            f" {f['kept'] / f['general']:13.2f}x {f['client'] / f['general']:15.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
