#!/usr/bin/env python3
"""berth's terminal server: a shell on a pseudo-terminal over a WebSocket, speaking ttyd's
wire protocol, so ttyd's own clients work and berth's proxy carries it like any other app.

    python3 berth-tty.py PORT      (the agent runs it as `python3 -c <this file> PORT`)

The shell is tmux (`new-session -A -s main`: every tab shares one session, as the seeds
describe) when the image has tmux, otherwise bash or sh, in /home/work. Python's standard
library only, so any image with python3 can run it.

Protocol (subprotocol `tty`): the client's first message is JSON with `columns` and `rows`
(and `AuthToken`, unused: berth's proxy has let the client in); then each message starts with
a command byte. Client: `0` input, `1` resize (JSON), `2` pause, `3` resume. Server: `0`
output, `1` window title, `2` preferences (JSON).
"""

import asyncio
import base64
import fcntl
import hashlib
import json
import os
import pty
import shutil
import signal
import struct
import sys
import termios

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PAGE = b"""<!doctype html><meta charset="utf-8"><title>berth terminal</title>
<p>berth's terminal speaks ttyd's WebSocket protocol at <code>ws</code> (subprotocol
<code>tty</code>); open it with berth's console or a ttyd client.</p>"""


def shell_argv():
    if shutil.which("tmux"):
        return ["tmux", "-2", "new-session", "-A", "-s", "main"]
    for shell in ("bash", "sh"):
        if shutil.which(shell):
            return [shell, "-l"]
    return ["/bin/sh"]


def resize(fd, columns, rows):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


async def read_frame(reader):
    """One WebSocket message (opcode, payload); continuation frames joined."""
    message, opcode = b"", None
    while True:
        head = await reader.readexactly(2)
        fin, op = head[0] & 0x80, head[0] & 0x0F
        length = head[1] & 0x7F
        if length == 126:
            length = struct.unpack("!H", await reader.readexactly(2))[0]
        elif length == 127:
            length = struct.unpack("!Q", await reader.readexactly(8))[0]
        mask = await reader.readexactly(4) if head[1] & 0x80 else b"\0\0\0\0"
        data = bytearray(await reader.readexactly(length))
        for i in range(length):
            data[i] ^= mask[i % 4]
        if op >= 0x8:  # control frames stand alone
            return op, bytes(data)
        if opcode is None:
            opcode = op
        message += data
        if fin:
            return opcode, message


def frame(opcode, payload):
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, length)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, length)
    return head + payload


async def terminal(reader, writer):
    opcode, hello = await read_frame(reader)
    try:
        size = json.loads(hello.decode("utf-8", "replace") or "{}")
    except ValueError:
        size = {}
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(os.environ.get("HOME", "/home/work") if os.path.isdir("/home/work") else "/")
        os.environ["TERM"] = "xterm-256color"
        argv = shell_argv()
        os.execvp(argv[0], argv)
    resize(fd, int(size.get("columns", 80)), int(size.get("rows", 24)))
    writer.write(frame(0x2, b"1" + b"berth terminal"))
    writer.write(frame(0x2, b"2" + json.dumps({}).encode()))
    loop = asyncio.get_running_loop()
    output = asyncio.Queue()

    def read_pty():
        try:
            data = os.read(fd, 65536)
        except OSError:  # the shell is gone
            data = b""
        if not data:
            loop.remove_reader(fd)
        output.put_nowait(data)

    loop.add_reader(fd, read_pty)

    async def pump_out():
        while True:
            data = await output.get()
            if not data:
                break
            writer.write(frame(0x2, b"0" + data))
            await writer.drain()
        # The shell exited: say so with a normal close, as ttyd does, and hang up.
        writer.write(frame(0x8, struct.pack("!H", 1000)))
        await writer.drain()
        writer.close()

    pump = asyncio.ensure_future(pump_out())
    try:
        while True:
            opcode, message = await read_frame(reader)
            if opcode == 0x8:
                break
            if opcode == 0x9:
                writer.write(frame(0xA, message))
                continue
            if not message:
                continue
            command, body = message[:1], message[1:]
            if command == b"0":
                os.write(fd, body)
            elif command == b"1":
                wanted = json.loads(body.decode() or "{}")
                resize(fd, int(wanted.get("columns", 80)), int(wanted.get("rows", 24)))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        try:
            loop.remove_reader(fd)
        except (ValueError, OSError):
            pass
        pump.cancel()
        try:
            os.kill(pid, signal.SIGHUP)
            os.waitpid(pid, 0)
        except OSError:
            pass
        os.close(fd)
        writer.close()


async def serve(reader, writer):
    try:
        request = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        writer.close()
        return
    lines = request.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("upgrade", "").lower() != "websocket":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(PAGE) + PAGE)
        await writer.drain()
        writer.close()
        return
    accept = base64.b64encode(
        hashlib.sha1((headers.get("sec-websocket-key", "") + GUID).encode()).digest())
    protocols = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
    answer = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n" % accept.decode())
    if "tty" in protocols:
        answer += "Sec-WebSocket-Protocol: tty\r\n"
    writer.write((answer + "\r\n").encode())
    await writer.drain()
    await terminal(reader, writer)


async def main(port):
    server = await asyncio.start_server(serve, "0.0.0.0", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7681))
