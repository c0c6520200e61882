"""The Unix-socket protocol's framing for the Python tests (docs/PROTOCOL.md): one connection,
messages as a 4-byte big-endian length followed by that many bytes of JSON."""
import json
import socket
import struct


class Conn:
    def __init__(self, path, timeout):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.connect(path)
        self.s.settimeout(timeout)

    def send(self, obj):
        body = json.dumps(obj).encode()
        self.s.sendall(struct.pack(">I", len(body)) + body)

    def _read(self, n):
        data = b""
        while len(data) < n:
            chunk = self.s.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return data

    def recv(self):
        (n,) = struct.unpack(">I", self._read(4))
        return json.loads(self._read(n))
