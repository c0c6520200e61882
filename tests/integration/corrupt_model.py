#!/usr/bin/env python3
"""Makes one defect in a copy of a model directory's safetensors file (stdlib only).

usage: corrupt_model.py FILE drop-tensor NAME | set-dtype NAME DTYPE | set-shape NAME JSON_LIST |
       garble-header | truncate BYTES
"""
import json
import struct
import sys


def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write(path, header, data):
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)


def main():
    path, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if op == "drop-tensor":
        header, data = read(path)
        del header[args[0]]
        write(path, header, data)
    elif op == "set-dtype":
        header, data = read(path)
        header[args[0]]["dtype"] = args[1]
        write(path, header, data)
    elif op == "set-shape":
        header, data = read(path)
        header[args[0]]["shape"] = json.loads(args[1])
        write(path, header, data)
    elif op == "garble-header":
        raw = bytearray(open(path, "rb").read())
        raw[8:12] = b"{{{x"
        open(path, "wb").write(bytes(raw))
    elif op == "truncate":
        raw = open(path, "rb").read()
        open(path, "wb").write(raw[:int(args[0])])
    else:
        sys.exit(f"unknown op {op}")


if __name__ == "__main__":
    main()
